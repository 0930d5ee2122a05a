//! The benchmarks' command line: `--name value` flags, and whether this is a smoke run.

/// A benchmark's arguments.
pub struct Args {
    args: Vec<String>,
    /// `cargo bench` passes `--bench`; `cargo test --all-targets` does not: then one small smoke
    /// run proves the benchmark still works without spending minutes on it.
    pub smoke: bool,
}

impl Args {
    /// This process's arguments.
    pub fn read() -> Args {
        let args: Vec<String> = std::env::args().collect();
        let smoke = !args.iter().any(|a| a == "--bench");
        Args { args, smoke }
    }

    /// The text after `name`, when given.
    pub fn text(&self, name: &str) -> Option<&str> {
        let at = self.args.iter().position(|a| a == name)?;
        self.args.get(at + 1).map(String::as_str)
    }

    /// The value after `name`, else `default` (also when it does not parse).
    pub fn flag<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        self.text(name).and_then(|v| v.parse().ok()).unwrap_or(default)
    }
}
