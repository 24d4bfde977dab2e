//! `firn txn`: compare, then write, across shards (`FIRN.TXN`), from the command line.
//!
//! Each `--if` is `KEY VERSION|VALUE|EXISTS|STAMP OP OPERAND`, each `--then`/`--else` one
//! command with its arguments (`SET k v`, `INCRBY n 2`, `GET k`, `DEL k` …), words apart
//! by spaces (`FIRN.LOG APPEND log TAGS 1 tag payload` appends a record with the other
//! writes). It prints whether the compares held, then each command's reply.

use clap::Args;
use redis::Value;

use crate::{Target, connect, show};

#[derive(Args)]
pub struct TxnArgs {
    /// A compare: 'KEY VERSION|VALUE|EXISTS|STAMP OP OPERAND' (OP: = != < <= > >=; EXISTS
    /// takes 1 or 0). Repeat for more; all must hold.
    #[arg(long = "if", value_name = "COMPARE")]
    compares: Vec<String>,
    /// A command to run when every compare holds: 'SET k v', 'INCRBY n 2', 'GET k' …
    #[arg(long = "then", value_name = "COMMAND")]
    then: Vec<String>,
    /// A command to run when a compare does not hold.
    #[arg(long = "else", value_name = "COMMAND")]
    otherwise: Vec<String>,
    #[command(flatten)]
    target: Target,
}

pub async fn txn(args: TxnArgs) -> Result<(), String> {
    let mut cmd = redis::cmd("FIRN.TXN");
    for compare in &args.compares {
        let words: Vec<&str> = compare.split_whitespace().collect();
        if words.len() != 4 {
            return Err(format!(
                "--if '{compare}': give KEY VERSION|VALUE|EXISTS|STAMP OP OPERAND (4 words)"
            ));
        }
        cmd.arg("IF").arg(&words);
    }
    for (word, commands) in [("THEN", &args.then), ("ELSE", &args.otherwise)] {
        for command in commands {
            let words: Vec<&str> = command.split_whitespace().collect();
            if words.is_empty() {
                return Err(format!("--{}: an empty command", word.to_lowercase()));
            }
            cmd.arg(word).arg(words.len()).arg(&words);
        }
    }
    let client = connect(&args.target).await?;
    match client.raw(&cmd).await.map_err(show)? {
        Value::Array(parts) if parts.len() == 2 => {
            if matches!(parts[0], Value::Int(1)) {
                println!("succeeded: the --then commands ran");
            } else {
                println!("a compare failed: the --else commands ran");
            }
            if let Value::Array(replies) = &parts[1] {
                for (i, reply) in replies.iter().enumerate() {
                    println!("{}) {}", i + 1, shown(reply));
                }
            }
            Ok(())
        }
        other => Err(format!("unexpected reply {other:?}")),
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::Okay => "OK".into(),
        Value::SimpleString(s) => s.clone(),
        Value::Nil => "(nil)".into(),
        Value::Int(n) => format!("(integer) {n}"),
        Value::BulkString(b) => format!("\"{}\"", String::from_utf8_lossy(b)),
        // An append's seqs.
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(shown).collect::<Vec<_>>().join(", ")
        ),
        Value::ServerError(e) => {
            format!("(error) {} {}", e.code(), e.details().unwrap_or_default())
        }
        other => format!("{other:?}"),
    }
}
