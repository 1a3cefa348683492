//! Shell completions and man pages of the workspace's command-line tools
//! (kvs-server, kvs-client, kvs-admin, ycsb-driver), made from each tool's
//! own clap definition so that they never disagree with `--help`.
//!
//! A tool flattens [`DocsFlags`] into its arguments (so that `--help`
//! shows them) and calls [`serve`] before it parses its command line:
//!
//! ```text
//! kvs-admin --completions bash > /usr/share/bash-completion/completions/kvs-admin
//! kvs-admin --man /usr/local/share/man/man1     # kvs-admin.1, kvs-admin-status.1, …
//! ```
//!
//! Either flag is taken alone: [`serve`] answers a command line that holds
//! nothing else (before the tool's own parse could ask for the command or
//! arguments it requires); in the tool's parse the flags are exclusive, so
//! that clap refuses them with other arguments, and [`DocsFlags::alone`]
//! refuses them with a command.

#![deny(missing_docs)]

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
pub use clap_complete::Shell;

/// The flags every tool takes: `--completions SHELL` and `--man DIR`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DocsFlags {
    /// Prints the completion script for SHELL (bash, zsh, fish, elvish,
    /// powershell) and exits; e.g. `--completions bash >
    /// /usr/share/bash-completion/completions/NAME`.
    #[arg(long, value_name = "SHELL", exclusive = true)]
    pub completions: Option<Shell>,
    /// Writes the man pages (roff) into DIR and exits: NAME.1, and
    /// NAME-COMMAND.1 for each command; e.g. `--man
    /// /usr/local/share/man/man1`.
    #[arg(long, value_name = "DIR", exclusive = true)]
    pub man: Option<PathBuf>,
}

/// A command line of the docs flags alone.
#[derive(clap::Parser, Debug)]
#[command(disable_help_flag = true, disable_version_flag = true)]
struct DocsOnly {
    #[command(flatten)]
    docs: DocsFlags,
}

/// If the process's command line is `--completions SHELL` or `--man DIR`
/// alone, does what it asks of `P`'s command and ends the process (exit
/// status 0, or 1 with the error on stderr); else returns, for the tool to
/// parse its command line.
pub fn serve<P: CommandFactory>() {
    if let Some(docs) = docs_only(std::env::args_os()) {
        docs.serve_for(P::command());
    }
}

/// The docs flags of `args` (the program's name first), if they are all
/// it holds and ask for something.
fn docs_only<I: IntoIterator<Item = T>, T: Into<std::ffi::OsString> + Clone>(
    args: I,
) -> Option<DocsFlags> {
    use clap::Parser;
    DocsOnly::try_parse_from(args)
        .ok()
        .map(|d| d.docs)
        .filter(DocsFlags::asked)
}

impl DocsFlags {
    /// Whether the flags ask for anything.
    pub fn asked(&self) -> bool {
        self.completions.is_some() || self.man.is_some()
    }

    /// After the tool's own parse, which took the flags with a command
    /// (clap's exclusive arguments conflict with arguments, not commands):
    /// ends the process with a usage error if they ask for anything.
    pub fn alone<P: CommandFactory>(&self) {
        if self.asked() {
            P::command()
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "--completions and --man are taken alone, with no command",
                )
                .exit();
        }
    }

    /// Does what the flags ask of `cmd` and ends the process.
    fn serve_for(&self, cmd: clap::Command) {
        let name = cmd.get_name().to_string();
        let done = match (&self.completions, &self.man) {
            (Some(shell), _) => completions(cmd, *shell, &mut std::io::stdout().lock()),
            (None, Some(dir)) => man_pages(cmd, dir).map(|files| {
                for f in files {
                    println!("{}", f.display());
                }
            }),
            (None, None) => Ok(()),
        };
        match done {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("{name}: {e}");
                std::process::exit(1)
            }
        }
    }
}

/// Writes `cmd`'s completion script for `shell` to `out`.
///
/// # Errors
/// Writing to `out` failed.
pub fn completions(
    mut cmd: clap::Command,
    shell: Shell,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let name = cmd.get_name().to_string();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut buf);
    out.write_all(&buf)?;
    out.flush()
}

/// Writes `cmd`'s man pages into `dir` (made if missing): `NAME.1`, and
/// `NAME-COMMAND.1` for each of its commands, at every depth. Returns the
/// files written.
///
/// # Errors
/// `dir` could not be made or a page not written; the error names the path.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let named = |e: std::io::Error, p: &Path| {
        std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| named(e, dir))?;
    let mut cmd = cmd;
    // Subcommands' names and versions as the pages show them ("kvs-admin-status").
    cmd.build();
    let mut files = Vec::new();
    write_pages(&cmd, cmd.get_name(), dir, &mut files).map_err(|(e, p)| named(e, &p))?;
    Ok(files)
}

/// Writes the page of `cmd`, named `name`, and those of its subcommands.
fn write_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<(), (std::io::Error, PathBuf)> {
    let path = dir.join(format!("{name}.1"));
    let page = cmd.clone().name(name.to_string());
    let mut buf = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut buf)
        .map_err(|e| (e, path.clone()))?;
    std::fs::write(&path, buf).map_err(|e| (e, path.clone()))?;
    files.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, files)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Parser, Subcommand};

    /// A tool with a required argument and two commands, one nested.
    #[derive(Parser, Debug)]
    #[command(name = "tool", version, about = "A tool")]
    struct Tool {
        /// Where to go.
        #[arg(long, required = true)]
        server: Option<String>,
        #[command(flatten)]
        docs: DocsFlags,
        #[command(subcommand)]
        cmd: Option<Cmd>,
    }

    #[derive(Subcommand, Debug)]
    enum Cmd {
        /// Shows the state.
        Status {
            /// As JSON.
            #[arg(long)]
            json: bool,
        },
        /// Moves things.
        Move {
            #[command(subcommand)]
            how: How,
        },
    }

    #[derive(Subcommand, Debug)]
    enum How {
        /// Moves fast.
        Fast,
    }

    #[test]
    fn the_flags_are_served_alone_and_refused_in_company() {
        let d = docs_only(["tool", "--completions", "bash"]).unwrap();
        assert_eq!(d.completions, Some(Shell::Bash));
        let d = docs_only(["tool", "--man", "/tmp/x"]).unwrap();
        assert_eq!(d.man, Some(PathBuf::from("/tmp/x")));
        for not_alone in [
            &["tool"][..],
            &["tool", "--server", "a", "--man", "/tmp/x"],
            &["tool", "--man", "/tmp/x", "status"],
            &["tool", "--completions", "bash", "--man", "/tmp/x"],
            &["tool", "--help"],
        ] {
            assert!(docs_only(not_alone).is_none(), "{not_alone:?}");
        }
        assert!(docs_only(["tool", "--completions", "tcsh"]).is_none());
        // The tool's own parse shows them, and refuses them in company.
        let e = Tool::try_parse_from(["tool", "--server", "a", "--man", "/tmp/x"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        let t = Tool::try_parse_from(["tool", "--server", "a", "status"]).unwrap();
        assert!(!t.docs.asked());
        assert!(matches!(t.cmd, Some(Cmd::Status { json: false })));
        let help = Tool::command().render_help().to_string();
        assert!(
            help.contains("--completions <SHELL>") && help.contains("--man <DIR>"),
            "{help}"
        );
    }

    #[test]
    fn completions_know_every_command_and_flag() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            completions(Tool::command(), shell, &mut out).unwrap();
            let s = String::from_utf8(out).unwrap();
            for word in ["status", "move", "server", "json", "fast"] {
                assert!(s.contains(word), "{shell:?}: no {word} in\n{s}");
            }
        }
    }

    #[test]
    fn a_page_for_the_tool_and_each_command() {
        let dir = test_support::TempDir::new("cli-docs", "man");
        let files = man_pages(Tool::command(), &dir.join("man1")).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["tool.1", "tool-status.1", "tool-move.1", "tool-move-fast.1"]
        );
        let top = std::fs::read_to_string(&files[0]).unwrap();
        assert!(top.contains(".TH tool 1"), "{top}");
        assert!(
            top.contains("\\-\\-server") && top.contains("status"),
            "{top}"
        );
        let status = std::fs::read_to_string(&files[1]).unwrap();
        assert!(
            status.contains(".TH tool-status 1") && status.contains("\\-\\-json"),
            "{status}"
        );
    }

    #[test]
    fn a_directory_that_cannot_be_made_is_named() {
        let dir = test_support::TempDir::new("cli-docs", "bad");
        let file = dir.join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let e = man_pages(Tool::command(), &file.join("man1")).unwrap_err();
        assert!(e.to_string().contains("a-file/man1"), "{e}");
    }
}
