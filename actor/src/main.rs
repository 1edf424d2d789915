//! `recur-actor`: parses the command line and runs it ([`actor::cli`]).

use clap::Parser;

fn main() -> anyhow::Result<()> {
    actor::cli::run(actor::cli::Cli::parse())
}
