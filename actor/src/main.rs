//! `recur-actor`: parses the command line and runs it ([`actor::cli`]).

#![forbid(unsafe_code)]

use clap::Parser;

fn main() -> anyhow::Result<()> {
    actor::cli::run(actor::cli::Cli::parse())
}
