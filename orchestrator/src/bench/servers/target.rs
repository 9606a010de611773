//! `[target]`: the server ratchet optimizes, in the user's words: how it is
//! built, which files are its source, how it is told its port, which
//! family its clients connect over, and what the agents are told it is.
//! The shipped values describe the C io_uring treatment; another server is
//! another `[target]` (docs/your-server.md).

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::glob::Globs;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TargetConfig {
    /// The build's argv, run in a copy of the source directory holding
    /// exactly the files `sources` matches; `{out}` is the directory it
    /// must leave `binary` in.
    pub build: Vec<String>,
    /// The file the build leaves, relative to `{out}`.
    pub binary: String,
    /// The files that make up the server, relative to its directory: what a
    /// build sees and what its identity (the build cache's key, the no-op
    /// check) is the hash of.
    pub sources: Vec<String>,
    /// The arguments that tell the server its port; `{port}` is replaced.
    pub port_args: Vec<String>,
    /// The family the load connects over, to the loopback address.
    pub family: Family,
    /// The server's language, for the agents (and their code fences).
    pub language: String,
    /// One paragraph on what the server is, for the agents.
    pub description: String,
    /// The server uses io_uring: the build needs liburing's header and
    /// `ratchet doctor` checks what the kernel allows.
    pub io_uring: bool,
    /// Variables of ratchet's environment the build gets beside `PATH`, by
    /// name: what a toolchain needs to find itself (`CARGO_HOME`,
    /// `RUSTUP_HOME`, `GOPATH`, `GOCACHE`, `HOME`). Never a secret: a name
    /// that looks like one is refused.
    pub build_env: Vec<String>,
    /// Directories of a toolchain the build user cannot reach where they
    /// are (rustup's `~/.cargo` and `~/.rustup` in root's home): the build
    /// sees each read-only at its own path, and nothing else of the
    /// directories around it. `~/` is ratchet's `HOME`.
    pub toolchain: Vec<String>,
}

impl Default for TargetConfig {
    fn default() -> Self {
        Self {
            build: ["make", "-s", "OUT={out}"].map(String::from).to_vec(),
            binary: "server".into(),
            sources: ["**/*.c", "**/*.h", "Makefile"].map(String::from).to_vec(),
            port_args: ["--port", "{port}"].map(String::from).to_vec(),
            family: Family::Ipv4,
            language: "C".into(),
            description: "A TCP server on io_uring (liburing 2.3), one thread on one core, \
                          serving short-lived connections."
                .into(),
            io_uring: true,
            build_env: Vec::new(),
            toolchain: Vec::new(),
        }
    }
}

/// The address family of the load's connections. A listener serves them
/// when it is bound to that family's loopback or wildcard address, or to
/// IPv6's wildcard without `IPV6_V6ONLY` (dual stack, Go's `":port"`),
/// which takes IPv4 connections too.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    #[default]
    Ipv4,
    Ipv6,
}

impl Family {
    pub fn loopback(self) -> IpAddr {
        match self {
            Family::Ipv4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Family::Ipv6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    }

    /// Where the load connects for a server on `port`.
    pub fn address(self, port: u16) -> SocketAddr {
        SocketAddr::new(self.loopback(), port)
    }
}

impl TargetConfig {
    pub fn validate(&self) -> Result<()> {
        if self.build.first().is_none_or(|p| p.trim().is_empty()) {
            bail!(
                "target.build must name a program to run, for example [\"make\", \"OUT={{out}}\"]"
            );
        }
        let binary = std::path::Path::new(&self.binary);
        if self.binary.trim().is_empty()
            || binary.is_absolute()
            || binary.components().any(|c| c.as_os_str() == "..")
        {
            bail!(
                "target.binary must be a path inside the build's output directory, got {:?}",
                self.binary
            );
        }
        Globs::new("target.sources", &self.sources)?;
        if !self.port_args.iter().any(|a| a.contains("{port}")) {
            bail!(
                "target.port_args must hold the placeholder {{port}}, for example [\"--port\", \"{{port}}\"], got {:?}",
                self.port_args
            );
        }
        if self.language.trim().is_empty() {
            bail!("target.language must name the server's language, for example \"C++\"");
        }
        for name in &self.build_env {
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                bail!("target.build_env: {name:?} is not a variable's name");
            }
            if crate::bench::servers::secrets::looks_secret(name) {
                bail!("target.build_env: {name} looks like a secret, and no build gets one");
            }
        }
        Ok(())
    }

    /// `toolchain` as absolute directories, `~/` expanded; each must be
    /// one, so a typo is named before any build rather than a cargo not
    /// found inside it.
    pub fn toolchain_dirs(&self) -> Result<Vec<PathBuf>> {
        self.toolchain
            .iter()
            .map(|d| {
                let path = match d.strip_prefix("~/") {
                    Some(rest) => match std::env::var_os("HOME") {
                        Some(home) => Path::new(&home).join(rest),
                        None => {
                            bail!("target.toolchain: {d:?} starts with ~/, and HOME is not set")
                        }
                    },
                    None => PathBuf::from(d),
                };
                if !path.is_absolute() {
                    bail!("target.toolchain: {d:?} is neither absolute nor under ~/");
                }
                if !path.is_dir() {
                    bail!("target.toolchain: {} is not a directory", path.display());
                }
                Ok(path)
            })
            .collect()
    }

    pub fn globs(&self) -> Globs {
        Globs::new("target.sources", &self.sources)
            .expect("validated when the configuration loaded")
    }

    /// The tag of the agents' code fences: `c`, `cpp`, `rust`, `go`.
    pub fn fence(&self) -> String {
        match self.language.to_ascii_lowercase().as_str() {
            "c++" => "cpp".into(),
            other => other.replace(' ', "-"),
        }
    }
}

/// `template` with `{port}` replaced by `port`.
pub fn port_args(template: &[String], port: u16) -> Vec<String> {
    template
        .iter()
        .map(|a| a.replace("{port}", &port.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TargetConfig> {
        let t: TargetConfig = toml::from_str(text)?;
        t.validate()?;
        Ok(t)
    }

    #[test]
    fn the_defaults_are_the_c_treatment() {
        let t = parse("").unwrap();
        assert_eq!(t.build, ["make", "-s", "OUT={out}"]);
        assert!(t.globs().matches("server.c") && t.globs().matches("Makefile"));
        assert_eq!(t.fence(), "c");
        assert_eq!(
            port_args(&t.port_args, 8080),
            ["--port".to_string(), "8080".into()]
        );
        assert_eq!(t.family.address(1).to_string(), "127.0.0.1:1");
    }

    #[test]
    fn another_server_in_its_own_words() {
        let t = parse(
            "build = [\"sh\", \"build.sh\", \"{out}/kv\"]\nbinary = \"kv\"\n\
             sources = [\"src/**/*.cpp\", \"build.sh\"]\nport_args = [\"-p{port}\"]\n\
             family = \"ipv6\"\nlanguage = \"C++\"\nio_uring = false\n",
        )
        .unwrap();
        assert_eq!(port_args(&t.port_args, 9), ["-p9".to_string()]);
        assert_eq!(t.family.address(9).to_string(), "[::1]:9");
        assert_eq!(t.fence(), "cpp");
        assert!(t.globs().matches("src/http/response.cpp"));
    }

    #[test]
    fn each_bad_field_is_named() {
        for (text, field) in [
            ("build = []", "target.build"),
            ("binary = \"/usr/bin/x\"", "target.binary"),
            ("binary = \"../x\"", "target.binary"),
            ("binary = \"\"", "target.binary"),
            ("sources = []", "target.sources"),
            ("sources = [\"/src/*.c\"]", "target.sources"),
            ("sources = [\"\"]", "target.sources"),
            ("port_args = [\"--port\", \"8080\"]", "target.port_args"),
            ("language = \" \"", "target.language"),
            ("build_env = [\"OPENAI_API_KEY\"]", "target.build_env"),
            ("build_env = [\"HOME=/root\"]", "target.build_env"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(field), "{text}: {err}");
        }
        let err = parse("family = \"ipx\"").unwrap_err().to_string();
        assert!(err.contains("ipx") && err.contains("ipv6"), "{err}");
        assert!(parse("bulid = []")
            .unwrap_err()
            .to_string()
            .contains("bulid"));
    }
}
