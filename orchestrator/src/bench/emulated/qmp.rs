//! The few QEMU Machine Protocol commands a warm start needs: save a booted
//! guest to a file, and resume a restored one once its files are in place.
//! QMP is JSON lines on a Unix socket; five commands do not justify a crate
//! (the maintained ones are async, or generate the whole schema).

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects once QEMU has made its socket, and leaves capabilities
    /// negotiation, as every client must before its first command.
    pub fn connect(socket: &Path, within: Duration) -> Result<Self> {
        let deadline = Instant::now() + within;
        let stream = loop {
            match UnixStream::connect(socket) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("connecting to QEMU's QMP socket {}", socket.display())
                    })
                }
            }
        };
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        let mut q = Qmp {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        };
        q.line().context("reading QEMU's QMP greeting")?;
        q.execute("qmp_capabilities", json!({}))?;
        Ok(q)
    }

    fn line(&mut self) -> Result<Value> {
        let mut l = String::new();
        if self.reader.read_line(&mut l)? == 0 {
            bail!("QEMU closed its QMP socket");
        }
        serde_json::from_str(&l).with_context(|| format!("parsing QMP line {l:?}"))
    }

    /// Runs `command`; events that arrive before its answer are skipped.
    pub fn execute(&mut self, command: &str, arguments: Value) -> Result<Value> {
        let request = json!({ "execute": command, "arguments": arguments });
        writeln!(self.writer, "{request}")?;
        loop {
            let v = self.line()?;
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                bail!("QMP {command}: {}", e["desc"].as_str().unwrap_or("error"));
            }
        }
    }

    /// Polls `query` every 20 ms until `done` says what it returned is
    /// final.
    pub fn until(&mut self, query: &str, done: impl Fn(&Value) -> bool) -> Result<Value> {
        loop {
            let v = self.execute(query, json!({}))?;
            if done(&v) {
                return Ok(v);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
