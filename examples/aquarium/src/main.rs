//! `aquarium`: films a wave into a running Firn cluster and checks every snapshot.
//!
//!     scripts/cluster-up
//!     cargo run --release -p firn-aquarium -- --image wave.png
//!
//! Prints what it saw and exits 1 if any snapshot broke a promise of a consistent cut.

use std::time::Duration;

use clap::Parser;
use firn_aquarium::{Config, Violation, check, render_png, run, shards_spanned};

/// The Freeze-Frame File System's wave in an aquarium, on Firn. Deletes and rewrites the
/// keys cam/0 … cam/N-1, and writes aquarium/start.
#[derive(Parser)]
#[command(name = "aquarium", version)]
struct Args {
    /// RESP addresses of the nodes, comma-separated (default: scripts/cluster-up's three).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "127.0.0.1:7379,127.0.0.1:7389,127.0.0.1:7399"
    )]
    nodes: Vec<String>,
    /// Number of cameras (keys cam/0 …).
    #[arg(long, default_value_t = 12)]
    cameras: usize,
    /// How long the cameras film.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    run_for: Duration,
    /// A frame per camera this often.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    frame_every: Duration,
    /// Readers taking snapshots.
    #[arg(long, default_value_t = 2)]
    readers: usize,
    /// Each reader takes a snapshot this often.
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    snapshot_every: Duration,
    /// Write every snapshot as a row of this PNG image (in the order of their times).
    #[arg(long)]
    image: Option<std::path::PathBuf>,
    /// The control: read each camera on its own (latest, linearizable, one after another)
    /// instead of one snapshot, and see the rows tear.
    #[arg(long)]
    one_by_one: bool,
    /// Read the cameras as files instead: `firn mount` directories of the store (one a
    /// node, comma-separated), each camera's file read at one time under DIR/@T/.
    #[arg(long, value_delimiter = ',', conflicts_with = "one_by_one")]
    files: Vec<std::path::PathBuf>,
}

const CAMERAS_MAX: usize = 1_000;

/// `println!` that does not panic when stdout is closed (`aquarium | head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    match aquarium(args).await {
        Ok(0) => {}
        Ok(_) => std::process::exit(1),
        Err(e) => {
            eprintln!("aquarium: {e}");
            std::process::exit(2);
        }
    }
}

/// Runs the scenario and prints its summary; the number of violations.
async fn aquarium(args: Args) -> Result<usize, firn_aquarium::Error> {
    if !(1..=CAMERAS_MAX).contains(&args.cameras) {
        return Err(format!("--cameras must be 1..={CAMERAS_MAX}").into());
    }
    let mut config = Config::new(args.nodes, args.cameras, args.run_for);
    config.frame_every = args.frame_every;
    config.readers = args.readers;
    config.snapshot_every = args.snapshot_every;
    if args.one_by_one {
        config.reads = firn_aquarium::Reads::OneByOne;
    }
    if !args.files.is_empty() {
        config.reads = firn_aquarium::Reads::Files(args.files.clone());
    }
    let first = firn_client::Client::connect(&config.nodes[0])
        .await
        .map_err(|e| {
            format!(
                "{}: {e} (is a cluster running? scripts/cluster-up)",
                config.nodes[0]
            )
        })?;
    let shards = shards_spanned(&first, &config.cameras).await?;
    say!(
        "aquarium: {} cameras in {shards} shard(s) on {} node(s), filming for {:?}",
        config.cameras.len(),
        config.nodes.len(),
        config.run_for
    );
    let report = run(&config).await?;
    let violations = check(&report);
    say!("  frames written     {:>8}", report.frames_written());
    say!(
        "  snapshots taken    {:>8}   ({} asked again of another node)",
        report.snapshots.len(),
        report.rechecked()
    );
    say!("  violations         {:>8}", violations.len());
    if config.reads == firn_aquarium::Reads::Snapshot {
        say!(
            "  snapshot-now lag   p50 {:.1} ms, p99 {:.1} ms behind real time",
            report.lag_ms(0.5),
            report.lag_ms(0.99)
        );
    }
    for Violation { what, .. } in violations.iter().take(10) {
        say!("  ! {what}");
    }
    if let Some(path) = args.image {
        let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        render_png(&report, &violations, std::io::BufWriter::new(file))?;
        let (w, h) = firn_aquarium::image_size(&report);
        say!(
            "  image              {} ({w}×{h}: a row per snapshot, oldest at the top; green margin: kept every promise)",
            path.display()
        );
    }
    Ok(violations.len())
}
