//! `recur-actor`: parses the command line and runs it ([`actor::cli`]).

#![forbid(unsafe_code)]

fn main() -> anyhow::Result<()> {
    actor::main_with(actor::Registry::builtin())
}
