//! `emq supervise` (hidden): the process `emq work` puts between itself and each job's command, so
//! the command dies with its worker — even a worker killed by SIGKILL, which runs no code of its
//! own on the way out.
//!
//! The worker starts `emq supervise --exec CMD` as the leader of a new process group, its stdin one
//! end of a Unix socket pair (the *link*), its stdout and stderr the pipes the worker reads. Over
//! the link:
//!
//! 1. the worker sends the payload as one frame: its length (8 bytes, big-endian), then its bytes;
//! 2. only once the whole frame has arrived does the supervisor start `sh -c CMD` in its own group,
//!    with the payload on the command's stdin — a worker that died while sending never gets a
//!    command run on a payload cut short (it would look like a shorter, or empty, payload);
//! 3. when the command exits, the supervisor writes how it ended (`exit N` or `signal N`, one line)
//!    and exits 0;
//! 4. the link closing first (the worker gone: its end of the socket is closed by the kernel, however
//!    the worker died) makes the supervisor SIGKILL its whole process group at once — the command,
//!    its pipelines and background subshells, and itself — before the job's lease can lapse and
//!    its redelivery start elsewhere.
//!
//! The supervisor outlives SIGTERM, SIGINT and SIGHUP sent to its group (they reach the command):
//! it stays to report how the command ended, and a worker's SIGKILL of the group ends it anyway.

use std::os::fd::AsFd;
use std::process::{ExitStatus, Stdio};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::signal::unix::{signal, SignalKind};

/// The subcommand's name, as `emq work` runs it.
pub const SUBCOMMAND: &str = "supervise";

/// The largest payload frame a supervisor takes (a payload is far smaller: the store's limit).
const FRAME_MAX: u64 = 1 << 32;

/// Exit status of a supervisor whose link closed before the whole payload arrived: the command was
/// not run.
pub const EXIT_NOT_DELIVERED: i32 = 124;

/// `emq supervise`: see the module's documentation. Not for use by hand.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The shell command (`sh -c CMD`).
    #[arg(long, value_name = "CMD")]
    pub exec: String,
}

/// How a command ended, as the supervisor reports it over the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this status.
    Exit(i32),
    /// A signal killed it.
    Signal(i32),
}

impl Ended {
    fn of(status: ExitStatus) -> Ended {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Ended::Exit(code),
            (None, Some(sig)) => Ended::Signal(sig),
            (None, None) => Ended::Exit(-1),
        }
    }

    /// The report's line.
    pub fn line(self) -> String {
        match self {
            Ended::Exit(code) => format!("exit {code}\n"),
            Ended::Signal(sig) => format!("signal {sig}\n"),
        }
    }

    /// Reads a report's line.
    pub fn parse(line: &str) -> Option<Ended> {
        let (what, n) = line.trim_end().split_once(' ')?;
        let n: i32 = n.parse().ok()?;
        match what {
            "exit" => Some(Ended::Exit(n)),
            "signal" => Some(Ended::Signal(n)),
            _ => None,
        }
    }
}

/// The frame that carries `payload` over the link: its length, then its bytes.
pub fn frame_header(payload: &[u8]) -> [u8; 8] {
    (payload.len() as u64).to_be_bytes()
}

/// Runs the supervisor. Its exit status is 0 once the command's end is reported,
/// [`EXIT_NOT_DELIVERED`] when the payload never fully arrived (nothing was run).
pub async fn run(args: Args) -> anyhow::Result<i32> {
    // handled (and ignored) here, so they reach only the command: this process stays to report
    let _term = signal(SignalKind::terminate())?;
    let _int = signal(SignalKind::interrupt())?;
    let _hup = signal(SignalKind::hangup())?;

    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .context("emq supervise: no stdin")?;
    let link = std::os::unix::net::UnixStream::from(fd);
    link.set_nonblocking(true)
        .context("emq supervise: stdin is not the worker's link (a Unix socket)")?;
    let link = UnixStream::from_std(link).context("emq supervise: stdin is not the worker's link")?;
    let (mut from_worker, mut to_worker) = link.into_split();

    let mut header = [0u8; 8];
    if from_worker.read_exact(&mut header).await.is_err() {
        return Ok(EXIT_NOT_DELIVERED);
    }
    let len = u64::from_be_bytes(header);
    if len > FRAME_MAX {
        anyhow::bail!("emq supervise: a payload frame of {len} bytes (not the worker's link?)");
    }
    let mut payload = vec![0u8; len as usize];
    if from_worker.read_exact(&mut payload).await.is_err() {
        return Ok(EXIT_NOT_DELIVERED);
    }

    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&args.exec)
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot run sh -c")?;
    let stdin = child.stdin.take();
    let writer = tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            // a command that ignores stdin closes it early: that is fine
            let _ = stdin.write_all(&payload).await;
        }
    });

    let mut byte = [0u8; 1];
    tokio::select! {
        status = child.wait() => {
            writer.abort();
            let ended = match status {
                Ok(s) => Ended::of(s),
                Err(_) => Ended::Exit(-1),
            };
            // a worker gone meanwhile cannot hear it: nothing else to do
            let _ = to_worker.write_all(ended.line().as_bytes()).await;
            Ok(0)
        }
        // the worker sends nothing after the frame: any return is its end of the link closing
        _ = from_worker.read(&mut byte) => {
            kill_group_and_self(child.id());
            // reached only when the group could not be signalled: the command at least
            let _ = child.start_kill();
            Ok(EXIT_NOT_DELIVERED)
        }
    }
}

/// SIGKILLs this process's group, which the worker made for it: the command, everything the
/// command started, and this process. When this process leads no group of its own (run by hand),
/// only the command.
fn kill_group_and_self(command: Option<u32>) {
    use rustix::process::{getpgrp, getpid, kill_process, kill_process_group, Pid, Signal};
    if getpgrp() == getpid() {
        let _ = kill_process_group(getpgrp(), Signal::KILL);
    } else if let Some(pid) = command.and_then(|p| i32::try_from(p).ok()).and_then(Pid::from_raw) {
        let _ = kill_process(pid, Signal::KILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_as_written() {
        for e in [Ended::Exit(0), Ended::Exit(75), Ended::Signal(9)] {
            assert_eq!(Ended::parse(&e.line()), Some(e));
        }
        assert_eq!(Ended::parse("exit"), None);
        assert_eq!(Ended::parse("quit 3\n"), None);
    }
}
