//! A headless Chromium driven over its DevTools protocol: a live page is
//! checked as a reader sees it, in a browser that keeps it open, rather
//! than dumped once.

use serde_json::{json, Value};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    socket: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Browser {
    /// Chromium, headless, with `url` open in its one tab.
    pub fn open(url: &str) -> Self {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(super::browser::chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1200,1400",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium");
        let port = devtools_port(profile.path().join("DevToolsActivePort"));
        let socket = page_socket(port);
        Self {
            child,
            _profile: profile,
            socket,
            next_id: 0,
        }
    }

    /// Sends one command and waits for its answer, skipping events.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.socket.send(Message::text(msg)).unwrap();
        loop {
            let Message::Text(text) = self.socket.read().unwrap() else {
                continue;
            };
            let v: Value = serde_json::from_str(text.as_str()).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// The value of a JavaScript expression in the page.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    /// The page as a PNG.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine;
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port Chromium chose, from the file it writes once it listens.
fn devtools_port(file: PathBuf) -> u16 {
    let start = Instant::now();
    loop {
        if let Some(port) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| t.lines().next()?.parse().ok())
        {
            return port;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Chromium did not start its DevTools server"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A DevTools connection to the tab: the page target `/json/list` names.
fn page_socket(port: u16) -> WebSocket<MaybeTlsStream<TcpStream>> {
    let start = Instant::now();
    loop {
        let list = reqwest::blocking::get(format!("http://127.0.0.1:{port}/json/list"))
            .and_then(|r| r.json::<Vec<Value>>())
            .unwrap_or_default();
        if let Some(url) = list
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
        {
            return tungstenite::connect(url).unwrap().0;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no page in Chromium"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
