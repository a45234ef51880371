//! metalherd's binary: parse the command line, start logging, run.

use clap::Parser;
use metalherd::cli::{Cli, Command};

/// mimalloc instead of glibc's malloc: with glibc, memory freed by the
/// blocking threads that serve large store reads stayed in per-thread
/// arenas (the API server grew to about 1 GiB after ten full lists of
/// 10,000 Machines), and malloc/free were a quarter of the boot script
/// handler's CPU time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    metalherd::telemetry::init(cli.global.log_json);
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let g = &cli.global;
    match cli.command {
        Command::Serve(a) => metalherd::app::serve(g, a).await,
        Command::Apply(a) => metalherd::cli::objects::apply(g, a).await,
        Command::Get(a) => metalherd::cli::objects::get(g, a).await,
        Command::Describe(a) => metalherd::cli::objects::describe(g, a).await,
        Command::Delete(a) => metalherd::cli::objects::delete(g, a).await,
        Command::Crds(a) if a.cluster_api => {
            print!("{}", metalherd::capi::api::crds_yaml()?);
            Ok(())
        }
        Command::Crds(_) => {
            print!("{}", crds_yaml()?);
            Ok(())
        }
        Command::Kubeconfig => {
            print!("{}", metalherd::cli::kubeconfig::render(g)?);
            Ok(())
        }
        Command::Version => {
            println!("metalherd {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::Bmc(a) => metalherd::cli::bmc::run(g, a).await,
        Command::HwTest(a) => metalherd::cli::hwtest::run_cmd(a).await,
        Command::Render(a) => metalherd::cli::render::run(g, a).await,
        Command::Reimage(a) => metalherd::cli::reimage::run(g, a).await,
        Command::Scale(a) => metalherd::cli::rollout::scale(g, a).await,
        Command::Rollout(a) => metalherd::cli::rollout::run(g, a).await,
        Command::Export(a) => metalherd::cli::backup::export(g, a).await,
        Command::Import(a) => metalherd::cli::backup::import(g, a).await,
    }
}

fn crds_yaml() -> anyhow::Result<String> {
    metalherd::api::crds_yaml()
}
