use std::io::Write as _;

use clap::CommandFactory;

use super::*;
use crate::serve::test_cli::{Cli, argv};

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

/// The settings `firn serve ARGS` resolves to, or the file's error message.
fn resolve(args: &[&str]) -> Result<Vec<Setting>, String> {
    match parse_from::<Cli>(&argv(args)) {
        Ok((_, settings)) => Ok(settings),
        Err(ConfigError::File(message)) => Err(message),
        Err(ConfigError::Clap(e)) => Err(e.render().to_string()),
    }
}

fn setting<'a>(settings: &'a [Setting], key: &str) -> &'a Setting {
    settings.iter().find(|s| s.key == key).unwrap()
}

fn value(settings: &[Setting], key: &str) -> Option<String> {
    setting(settings, key).value.clone()
}

fn refusal(text: &str) -> String {
    let file = config_file(text);
    let message = resolve(&["--config", file.path().to_str().unwrap()]).unwrap_err();
    assert!(
        message.contains(&file.path().display().to_string()),
        "{message}"
    );
    message
}

#[test]
fn file_values_are_defaults_that_flags_override() {
    let file = config_file(
        "# a node\nshards = 5\ndata-dir = \"/srv/firn\"\nallow-flushall = true\n\
         peers = [\"1=a:7381\", \"2=b:7381\"]\nretention-interval = \"2s\"\n",
    );
    let path = file.path().to_str().unwrap();
    let settings = resolve(&["--config", path, "--shards", "7"]).unwrap();
    assert_eq!(value(&settings, "shards").as_deref(), Some("7"));
    assert_eq!(setting(&settings, "shards").source, "flag");
    assert_eq!(value(&settings, "data-dir").as_deref(), Some("/srv/firn"));
    assert_eq!(
        setting(&settings, "data-dir").source,
        format!("config file {path}")
    );
    assert_eq!(value(&settings, "allow-flushall").as_deref(), Some("true"));
    assert_eq!(
        value(&settings, "peers").as_deref(),
        Some("1=a:7381,2=b:7381")
    );
    assert_eq!(
        value(&settings, "retention-interval").as_deref(),
        Some("2s")
    );
    assert_eq!(
        value(&settings, "resp-addr").as_deref(),
        Some("127.0.0.1:7379")
    );
    assert_eq!(setting(&settings, "resp-addr").source, "default");
    assert_eq!(value(&settings, "local-region"), None);
    // Neither the file's own flag nor the dry run is a setting.
    assert!(
        settings
            .iter()
            .all(|s| s.key != "config" && s.key != "print-config")
    );
}

#[test]
fn an_unknown_key_is_refused_with_its_line_and_the_keys_there_are() {
    let message = refusal("shards = 3\n\ndata_dir = \"/srv\"\n");
    assert!(refusal("shards = 3\ndata_dir = 1\n").contains("line 2: "));
    assert!(
        message.contains("line 3: unknown key `data_dir`"),
        "{message}"
    );
    assert!(message.contains("did you mean `data-dir`?"), "{message}");
    assert!(message.contains("resp-addr, http-addr"), "{message}");
    let message = refusal("colour = \"blue\"\n");
    assert!(
        message.contains("line 1: unknown key `colour`"),
        "{message}"
    );
    let message = refusal("config = \"other.toml\"\n");
    assert!(message.contains("command line only"), "{message}");
}

#[test]
fn a_bad_value_is_refused_by_its_flags_own_parser() {
    let message = refusal("peer-addr = \"0.0.0.0:7381\"\nshards = \"many\"\n");
    assert!(message.contains("line 2: `shards` = \"many\""), "{message}");
    assert!(message.contains("invalid digit"), "{message}");
    let message = refusal("retention-interval = \"soon\"\n");
    assert!(message.contains("`retention-interval`"), "{message}");
    let message = refusal("resp-addr = \"localhost\"\n");
    assert!(message.contains("`resp-addr`"), "{message}");
    let message = refusal("node-id = 0\n");
    assert!(message.contains("node ids start at 1"), "{message}");
    let message = refusal("in-memory = \"yes please\"\n");
    assert!(message.contains("`in-memory`"), "{message}");
}

#[test]
fn values_that_are_no_flags_text_are_refused() {
    let message = refusal("retention-interval = 1.5\n");
    assert!(
        message.contains("`retention-interval` is a float"),
        "{message}"
    );
    let message = refusal("[serve]\nshards = 3\n");
    assert!(message.contains("`serve` is a table"), "{message}");
    let message = refusal("shards = [[1]]\n");
    assert!(message.contains("`shards` is an array"), "{message}");
    let message = refusal("shards = \n");
    assert!(message.contains("not valid TOML"), "{message}");
}

#[test]
fn a_missing_file_is_refused_by_name() {
    let message = resolve(&["--config", "/nonexistent/firn.toml"]).unwrap_err();
    assert!(
        message.starts_with("/nonexistent/firn.toml: cannot read the config file"),
        "{message}"
    );
}

#[test]
fn host_ordinal_is_a_node_id_setting() {
    let file = config_file("node-id = \"host-ordinal\"\n");
    let settings = resolve(&["--config", file.path().to_str().unwrap()]).unwrap();
    assert_eq!(value(&settings, "node-id").as_deref(), Some("host-ordinal"));
}

#[test]
fn printed_settings_read_back_as_the_same_settings() {
    let file = config_file(
        "shards = 5\ndata-dir = \"/srv/firn \\\"a\\\"\"\npeers = \"1=a:7381,2=b:7381\"\n\
         in-memory = true\nlocal-region = \"off\"\n",
    );
    let first = resolve(&["--config", file.path().to_str().unwrap(), "--node-id", "2"]).unwrap();
    let printed = render(&first);
    let again = config_file(&printed);
    let second = resolve(&["--config", again.path().to_str().unwrap()]).unwrap();
    for s in &first {
        assert_eq!(s.value, value(&second, &s.key), "{}\n{printed}", s.key);
    }
    assert!(printed.contains("shards = 5"), "{printed}");
    assert!(printed.contains("# join (unset)"), "{printed}");
}

#[test]
fn check_knows_every_setting_of_serve() {
    let cli = Cli::command();
    let serve = cli.find_subcommand("serve").unwrap();
    let keys: Vec<&str> = setting_args(serve).map(|(k, _)| k).collect();
    assert!(keys.contains(&"data-dir") && keys.contains(&"peers"));
    assert!(!keys.contains(&"config") && !keys.contains(&"print-config"));
}

/// A value from `FIRN_<FLAG>` that clap refuses is reported with the variable's name; one
/// given on the command line is not.
#[test]
fn a_bad_value_from_the_environment_names_its_variable() {
    let cmd = Cli::command();
    let error = cmd
        .clone()
        .try_get_matches_from(argv(&["--shards", "abc"]))
        .err()
        .unwrap();
    let set = |name: &str| name == "FIRN_SHARDS";
    // As clap sees an environment value: the same error, without the flag on the line.
    let note = env_source_note(&cmd, &error, &argv(&[]), set).unwrap();
    assert!(note.contains("FIRN_SHARDS"), "{note}");
    assert_eq!(
        env_source_note(&cmd, &error, &argv(&["--shards", "abc"]), set),
        None
    );
    assert_eq!(
        env_source_note(&cmd, &error, &argv(&["--shards=abc"]), set),
        None
    );
    assert_eq!(env_source_note(&cmd, &error, &argv(&[]), |_| false), None);
}
