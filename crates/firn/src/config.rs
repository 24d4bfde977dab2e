//! Where `firn serve`'s settings come from: a flag, else `FIRN_<FLAG>` in the environment,
//! else the TOML file named by `--config` (or `FIRN_CONFIG`), else the flag's default.
//!
//! The clap definitions in `serve.rs` are the one list of settings, their names and their
//! defaults. A config file does not add a layer of its own: each of its keys is checked
//! against those definitions (the key must be a flag's long name, the value must pass the
//! flag's own parser) and then handed to clap as that flag's default, so that clap's own order
//! — command line, then environment, then default — is the precedence. This module never
//! decides what a setting means or what its default is.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};

/// The subcommand whose settings a config file holds.
const SERVE: &str = "serve";
/// The flag that names the file (its clap id).
const CONFIG_ID: &str = "config";
/// Flags that are not settings: a file may not hold them, and `--print-config` omits them.
const NOT_SETTINGS: [&str; 3] = ["config", "print-config", "help"];
/// Largest config file read: a settings file is a few hundred bytes; anything this large is
/// the wrong file.
const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;

/// One setting as `firn serve` resolved it: its value and where the value came from.
#[derive(Clone, Debug, Default)]
pub struct Setting {
    /// The flag's long name, which is also its key in a config file.
    pub key: String,
    /// The value as text, as it was given (`None`: unset, and no default).
    pub value: Option<String>,
    /// Where `value` came from, for `--print-config`.
    pub source: String,
}

/// Why the command line or the config file was refused.
pub enum ConfigError {
    /// The command line (clap's own message and exit code; help and version too).
    Clap(clap::Error),
    /// The config file: the message names the file, and the key where there is one.
    File(String),
}

impl From<clap::Error> for ConfigError {
    fn from(e: clap::Error) -> Self {
        ConfigError::Clap(e)
    }
}

/// `firn`'s command line (see [`parse`]), with `serve`'s settings and their sources kept for
/// `--print-config`.
pub fn parse_firn() -> crate::Cli {
    let (mut cli, settings) = parse::<crate::Cli>();
    if let crate::Command::Serve(args) = &mut cli.command {
        args.settings = settings;
    }
    cli
}

/// Parses this process's command line; for `firn serve`, with its config file's values as
/// defaults. Exits as clap does on a bad command line (or `--help`), and with status 2 and a
/// message naming the file and the key on a bad config file.
pub fn parse<C: CommandFactory + FromArgMatches>() -> (C, Vec<Setting>) {
    let args: Vec<OsString> = std::env::args_os().collect();
    match parse_from::<C>(&args) {
        Ok(parsed) => parsed,
        Err(ConfigError::Clap(e)) => {
            let note = env_source_note(&C::command(), &e, &args, |name| {
                std::env::var_os(name).is_some()
            });
            match note {
                Some(note) => {
                    let _ = e.print();
                    eprintln!("{note}");
                    std::process::exit(2);
                }
                None => e.exit(),
            }
        }
        Err(ConfigError::File(message)) => {
            eprintln!("firn: {message}");
            std::process::exit(2);
        }
    }
}

/// For a value clap refused that came from the environment (the flag was not on the command
/// line and its variable is set, as `is_set` says), a line naming the variable: clap's own
/// message names only the flag.
pub fn env_source_note(
    cmd: &Command,
    error: &clap::Error,
    args: &[OsString],
    is_set: impl Fn(&str) -> bool,
) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(shown)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = shown.split_whitespace().next()?.strip_prefix("--")?;
    let on_command_line = args.iter().any(|a| {
        a.to_str()
            .and_then(|a| a.strip_prefix("--"))
            .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
    });
    if on_command_line {
        return None;
    }
    fn find<'a>(cmd: &'a Command, long: &str) -> Option<&'a Arg> {
        cmd.get_arguments()
            .find(|a| a.get_long() == Some(long))
            .or_else(|| cmd.get_subcommands().find_map(|s| find(s, long)))
    }
    let env = find(cmd, long)?.get_env()?.to_str()?.to_string();
    is_set(&env).then(|| format!("  (the value came from the environment variable {env})"))
}

/// [`parse`] over the given arguments (the program's name first), without exiting.
pub fn parse_from<C: CommandFactory + FromArgMatches>(
    args: &[OsString],
) -> Result<(C, Vec<Setting>), ConfigError> {
    let first = C::command().try_get_matches_from(args)?;
    let Some((SERVE, serve)) = first.subcommand() else {
        return Ok((C::from_arg_matches(&first)?, Vec::new()));
    };
    let (matches, file) = match serve.get_one::<PathBuf>(CONFIG_ID) {
        None => (first, None),
        Some(path) => {
            let file = ConfigFile::read(path, serve_command::<C>())?;
            let command = C::command().mut_subcommand(SERVE, |s| file.as_defaults(s));
            (command.try_get_matches_from(args)?, Some(file))
        }
    };
    let serve = matches
        .subcommand_matches(SERVE)
        .expect("the same arguments parse to the same subcommand");
    let settings = settings(&serve_command::<C>(), serve, file.as_ref());
    Ok((C::from_arg_matches(&matches)?, settings))
}

fn serve_command<C: CommandFactory>() -> Command {
    C::command()
        .find_subcommand(SERVE)
        .cloned()
        .expect("firn has a serve subcommand")
}

/// The settings a file may hold: `serve`'s flags that have a long name.
fn setting_args(serve: &Command) -> impl Iterator<Item = (&str, &Arg)> {
    serve.get_arguments().filter_map(|arg| {
        let key = arg.get_long()?;
        (!NOT_SETTINGS.contains(&key)).then_some((key, arg))
    })
}

/// A config file's values, each checked against its flag.
struct ConfigFile {
    path: PathBuf,
    /// (clap id, value as the flag's text), in the file's order.
    values: Vec<(String, String)>,
}

impl ConfigFile {
    fn read(path: &Path, serve: Command) -> Result<ConfigFile, ConfigError> {
        let named = |what: String| ConfigError::File(format!("{}: {what}", path.display()));
        let size = std::fs::metadata(path)
            .map_err(|e| named(format!("cannot read the config file: {e}")))?
            .len();
        if size > CONFIG_FILE_BYTES_MAX {
            return Err(named(format!(
                "the config file is {size} bytes; the limit is {CONFIG_FILE_BYTES_MAX}"
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| named(format!("cannot read the config file: {e}")))?;
        let values = check(&text, &serve).map_err(named)?;
        Ok(ConfigFile {
            path: path.to_path_buf(),
            values,
        })
    }

    /// `serve` with the file's values as its flags' defaults.
    fn as_defaults(&self, mut serve: Command) -> Command {
        for (id, value) in &self.values {
            serve = serve.mut_arg(id, |a| a.default_value(value.clone()));
        }
        serve
    }

    fn holds(&self, id: &str) -> bool {
        self.values.iter().any(|(i, _)| i == id)
    }
}

/// Checks a config file's text against `serve`'s flags: every key is a setting, every value
/// passes its flag's parser. Returns (clap id, value) pairs.
fn check(text: &str, serve: &Command) -> Result<Vec<(String, String)>, String> {
    let document = toml_edit::Document::parse(text).map_err(|e| format!("not valid TOML: {e}"))?;
    let table = document.as_table();
    let line = |key: &str| {
        let at = table
            .get_key_value(key)
            .and_then(|(k, _)| k.span())
            .map_or(0, |span| span.end);
        text[..at].matches('\n').count() + 1
    };
    let mut values = Vec::new();
    for (key, item) in table.iter() {
        if item.is_table() || item.is_array_of_tables() {
            return Err(format!(
                "line {}: `{key}` is a table; settings are plain `key = value` lines at the \
                 top of the file",
                line(key)
            ));
        }
        let Some((_, arg)) = setting_args(serve).find(|(long, _)| *long == key) else {
            return Err(unknown_key(key, line(key), serve));
        };
        let value =
            value_text(item).map_err(|what| format!("line {}: `{key}` is {what}", line(key)))?;
        check_value(key, arg, &value)
            .map_err(|why| format!("line {}: `{key}` = {value:?}: {why}", line(key)))?;
        values.push((arg.get_id().to_string(), value));
    }
    Ok(values)
}

fn unknown_key(key: &str, line: usize, serve: &Command) -> String {
    let keys: Vec<&str> = setting_args(serve).map(|(k, _)| k).collect();
    let dashed = key.replace('_', "-");
    let hint = if keys.contains(&dashed.as_str()) {
        format!("did you mean `{dashed}`? ")
    } else if NOT_SETTINGS.contains(&key) {
        format!("`{key}` is given on the command line only. ")
    } else {
        String::new()
    };
    format!(
        "line {line}: unknown key `{key}`; {hint}the keys are `firn serve`'s flags: {}",
        keys.join(", ")
    )
}

/// A TOML value as the text its flag takes: strings as they are, integers and booleans
/// written out, an array of strings joined with commas (as `--peers` takes them).
fn value_text(item: &toml_edit::Item) -> Result<String, String> {
    use toml_edit::Value;
    let scalar = |value: &Value| match value {
        Value::String(s) => Ok(s.value().clone()),
        Value::Integer(i) => Ok(i.value().to_string()),
        Value::Boolean(b) => Ok(b.value().to_string()),
        Value::Float(_) => Err("a float; give a whole number or a string such as \"1.5s\""),
        Value::Datetime(_) => Err("a date; give a string"),
        Value::Array(_) | Value::InlineTable(_) => Err("nested"),
    };
    match item {
        toml_edit::Item::Value(Value::Array(items)) => items
            .iter()
            .map(|v| scalar(v).map_err(|_| "an array of other than strings and numbers".into()))
            .collect::<Result<Vec<_>, String>>()
            .map(|parts| parts.join(",")),
        toml_edit::Item::Value(value) => scalar(value).map_err(str::to_string),
        _ => Err("not a value".into()),
    }
}

/// Runs `value` through `arg`'s own parser, alone (so that its relations to other flags,
/// such as conflicts, are judged once every source is known).
fn check_value(key: &str, arg: &Arg, value: &str) -> Result<(), String> {
    let alone = Arg::new("value")
        .long(key.to_string())
        .action(ArgAction::Set)
        .value_parser(arg.get_value_parser().clone());
    let probe = Command::new("firn-config").arg(alone);
    match probe.try_get_matches_from([OsString::from("firn"), format!("--{key}={value}").into()]) {
        Ok(_) => Ok(()),
        Err(e) => Err(std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_else(|| {
                // Clap's own rendering, without its "error: " lead and usage footer.
                e.render()
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim_start_matches("error: ")
                    .to_string()
            })),
    }
}

/// Every setting of `serve` with the value it resolved to and its source.
fn settings(serve: &Command, matches: &ArgMatches, file: Option<&ConfigFile>) -> Vec<Setting> {
    setting_args(serve)
        .map(|(key, arg)| {
            let id = arg.get_id().as_str();
            let value = matches.get_raw(id).map(|values| {
                values
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            });
            let source = match matches.value_source(id) {
                Some(ValueSource::CommandLine) => "flag".to_string(),
                Some(ValueSource::EnvVariable) => format!(
                    "environment {}",
                    arg.get_env()
                        .map_or(String::new(), |e| e.to_string_lossy().into())
                ),
                _ => match file.filter(|f| f.holds(id)) {
                    Some(f) => format!("config file {}", f.path.display()),
                    None => "default".to_string(),
                },
            };
            Setting {
                key: key.to_string(),
                value,
                source,
            }
        })
        .collect()
}

/// The settings as a config file (`--print-config`): one `key = value` line each, with its
/// source in a comment, so that the output can be read back with `--config`.
pub fn render(settings: &[Setting]) -> String {
    let width = settings
        .iter()
        .map(|s| s.key.len() + s.value.as_ref().map_or(0, |v| toml_value(v).len()))
        .max()
        .unwrap_or(0);
    let mut out = String::from(
        "# firn serve: the settings it runs with (flag > environment > config file > default)\n",
    );
    for s in settings {
        let line = match &s.value {
            Some(v) => format!("{} = {}", s.key, toml_value(v)),
            None => format!("# {} (unset)", s.key),
        };
        let _ = writeln!(out, "{line:width$}  # {}", s.source, width = width + 3);
    }
    out
}

/// `text` as a TOML value that reads back as the same text: a number or a boolean bare
/// when it is written exactly as TOML writes it, else a string.
fn toml_value(text: &str) -> String {
    let bare = text == "true"
        || text == "false"
        || text.parse::<i64>().is_ok_and(|n| n.to_string() == text);
    if bare {
        text.to_string()
    } else {
        toml_edit::Value::from(text).to_string()
    }
}

#[cfg(test)]
mod tests;
