//! The real `stride` binary as a test starts it: a server process (killed
//! with SIGKILL when dropped) and one-shot commands. Every test names its
//! data directory — `--data-dir` with a temporary directory, or the
//! default directory pointed at one by `STRIDE_DATA_DIR` — or runs
//! `--in-memory`, so that no test touches the user's default directory.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// A `stride` command with the environment a test controls: no password,
/// and the default data directory's variables removed (a test that wants
/// the default directory sets `STRIDE_DATA_DIR` itself).
pub fn command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stride"));
    for var in ["STRIDE_PASSWORD", "STRIDE_DATA_DIR", "XDG_DATA_HOME"] {
        command.env_remove(var);
    }
    command
}

/// A directory of its own for one test, empty.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stride-crash-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A running `stride … serve --port 0`.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// Starts `command` (whose arguments end in `serve --port 0`) and waits
    /// until it accepts connections; `Err` with its stderr when it exits
    /// first.
    pub fn spawn(mut command: Command) -> Result<Server, String> {
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("start stride serve");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = String::new();
        let addr = loop {
            let Some(line) = lines.next() else {
                let status = child.wait();
                return Err(format!("the server exited ({status:?}):\n{seen}"));
            };
            let line = line.unwrap();
            if let Some(rest) = line.split("ready to accept connections on ").nth(1) {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
            seen.push_str(&line);
            seen.push('\n');
        };
        // Keep draining stderr so that the server never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        Ok(Server { child, addr })
    }

    /// Starts a server on data directory `dir` with the global flags
    /// `extra`, `password` as the bootstrap superuser's.
    pub fn on_dir(dir: &Path, password: Option<&str>, extra: &[&str]) -> Server {
        let mut c = command();
        c.args(["--workers", "1", "--data-dir"])
            .arg(dir)
            .args(extra)
            .args(["serve", "--port", "0"]);
        if let Some(p) = password {
            c.env("STRIDE_PASSWORD", p);
        }
        Server::spawn(c).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Kills the server with SIGKILL and waits for it.
    pub fn kill(self) {
        drop(self);
    }
}

impl Drop for Server {
    /// A test that fails midway still leaves no server behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `command` to its end.
pub fn output(mut command: Command) -> Output {
    command.output().expect("run stride")
}
