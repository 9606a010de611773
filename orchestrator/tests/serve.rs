//! `ratchet serve` on real runs, read by a real browser: a run's page shows
//! each attempt as the loop decides it, without a reload; its charts are
//! drawn; a finished run's page is its report; and nothing outside
//! `results/` can be reached.

mod common;

use common::devtools::Browser;
use common::run_loop::planted_playbook;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A reader sees an attempt this soon after its journal line, or the page
/// is not live.
const LIVE_WITHIN: Duration = Duration::from_secs(2);

/// A secret in ratchet's environment, planted where a page would show it.
const SECRET: (&str, &str) = ("RATCHET_TEST_API_KEY", "sk-planted-7f3a9c");

struct Served {
    child: Child,
    url: String,
    log: std::sync::mpsc::Receiver<String>,
}

impl Served {
    fn start(root: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(ratchet())
            .arg("--config")
            .arg(root.join("harness.toml"))
            .args(["serve", "--port", "0"])
            .args(args)
            .env(SECRET.0, SECRET.1)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .trim_end_matches('/')
            .to_string();
        let (tx, log) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self { child, url, log }
    }

    /// Status and body of GET `path`, sent exactly as written: no client
    /// tidies a `..` away before the server sees it.
    fn get(&self, path: &str) -> (u16, String) {
        let addr = self.url.trim_start_matches("http://");
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string();
        (status, body)
    }

    /// The server's log lines so far.
    fn logged(&self) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(200));
        self.log.try_iter().collect()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_path_out_of_results_is_refused_and_logged() {
    let repo = fixture_repo("", &[]);
    let root = repo.path();
    let run = root.join("results/r1");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("run.json"), "{}").unwrap();
    std::fs::write(run.join("notes.txt"), format!("key {}\n", SECRET.1)).unwrap();
    std::fs::write(root.join("outside.txt"), "outside\n").unwrap();
    std::os::unix::fs::symlink(root.join("outside.txt"), run.join("leak.txt")).unwrap();
    let served = Served::start(root, &[]);

    let (status, body) = served.get("/files/r1/notes.txt");
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains(SECRET.1), "{body}");
    assert!(
        body.contains(&format!("[redacted ${}]", SECRET.0)),
        "{body}"
    );

    for bad in [
        "/files/r1/../../outside.txt",
        "/files/..%2Foutside.txt",
        "/files/%2Fetc%2Fpasswd",
        "/files/r1/leak.txt",
        "/runs/..",
        "/runs/..%2F..%2Fetc",
    ] {
        let (status, body) = served.get(bad);
        assert_eq!(status, 404, "{bad}: {body}");
        assert!(
            !body.contains("outside") && !body.contains("root:"),
            "{bad}: {body}"
        );
    }
    let log = served.logged();
    assert!(
        log.iter().filter(|l| l.contains("404 for")).count() >= 6,
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("leak.txt") && l.contains("outside results/")),
        "{log:#?}"
    );
}

/// Attempts the journal holds, whole lines only.
fn journal_attempts(run_dir: &Path) -> usize {
    std::fs::read_to_string(run_dir.join("attempts.jsonl"))
        .map(|t| t.lines().filter(|l| l.ends_with('}')).count())
        .unwrap_or(0)
}

const ROWS: &str = "document.querySelectorAll('#attempts tr[id^=\"attempt-\"]').length";

#[test]
fn a_live_page_shows_each_attempt_as_it_is_decided() {
    let _g = exclusive();
    let mut playbook = planted_playbook();
    // The secret rides in a hypothesis into the journal; no page shows it.
    playbook[3] = playbook[3].replace(
        "Reword a comment",
        &format!("Reword a comment {}", SECRET.1),
    );
    let repo = fixture_repo("", &playbook);
    let root = repo.path();
    let mut run = Command::new(ratchet())
        .arg("--config")
        .arg(root.join("harness.toml"))
        .arg("run")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let run_dir = loop {
        let record = std::fs::read_dir(root.join("results"))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|dir| dir.join("run.json").is_file());
        if let Some(dir) = record {
            break dir;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run wrote no record"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let id = run_dir.file_name().unwrap().to_str().unwrap().to_string();
    let served = Served::start(root, &[]);
    let mut browser = Browser::open(&format!("{}/runs/{id}", served.url));
    wait_for(&mut browser, "document.getElementById('live') !== null", 30);
    browser.eval("window.loadedOnce = 'yes'");

    // Each attempt: when its journal line landed, and when the page showed it.
    let mut journal_at: Vec<Instant> = Vec::new();
    let mut page_at: Vec<Instant> = Vec::new();
    let mut ended = None;
    while page_at.len() < 5 {
        let now = Instant::now();
        while journal_at.len() < journal_attempts(&run_dir) {
            journal_at.push(now);
        }
        let shown = browser.eval(ROWS).as_u64().unwrap_or(0) as usize;
        while page_at.len() < shown {
            page_at.push(now);
        }
        if ended.is_none() {
            ended = run.try_wait().unwrap().map(|_| now);
        }
        if let Some(t) = ended {
            assert!(
                now - t < Duration::from_secs(10),
                "the page stopped at {shown} of {} attempts",
                journal_at.len()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(400),
            "the run took too long"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(run.wait().unwrap().success());
    for (n, (j, p)) in journal_at.iter().zip(&page_at).enumerate() {
        let lag = p.saturating_duration_since(*j);
        assert!(
            lag <= LIVE_WITHIN,
            "attempt {} appeared {lag:?} after its journal line",
            n + 1
        );
    }
    assert_eq!(
        browser.eval("window.loadedOnce"),
        "yes",
        "the page was reloaded"
    );

    // The charts are drawn, with marks in them.
    let drawn = browser.eval(
        "[...document.querySelectorAll('svg.chart')].filter(s => s.getBoundingClientRect().width > 100 \
         && s.querySelectorAll('circle,path,rect,polyline,line').length > 3).length",
    );
    assert!(drawn.as_u64().unwrap() >= 2, "charts drawn: {drawn}");
    let text = browser
        .eval("document.body.innerText")
        .as_str()
        .unwrap()
        .to_string();
    assert!(!text.contains(SECRET.1), "the secret is on the page");
    assert!(
        text.contains(&format!("[redacted ${}]", SECRET.0)),
        "{text}"
    );
    let shot = browser.screenshot();
    save_screenshot(&shot);

    // The finished run's page is its report.
    let report = root.join("report.html");
    let out = Command::new(ratchet())
        .arg("--config")
        .arg(root.join("harness.toml"))
        .args(["report", &id, "-o"])
        .arg(&report)
        .env(SECRET.0, SECRET.1)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", cli::show(&out));
    let report = std::fs::read_to_string(&report).unwrap();
    let body = report
        .split_once("<body>")
        .unwrap()
        .1
        .rsplit_once("</body>")
        .unwrap()
        .0;
    // The report as written shows the journal as it is; the page redacts.
    let body = body.replace(SECRET.1, &format!("[redacted ${}]", SECRET.0));
    let (status, page) = served.get(&format!("/runs/{id}"));
    assert_eq!(status, 200);
    if !page.contains(&body) {
        let at = body
            .bytes()
            .zip(page.split_once("</p>").unwrap().1.bytes())
            .position(|(a, b)| a != b);
        panic!("the page of a finished run is not its report: they part at byte {at:?} of the report's body:\n{}", &body[at.unwrap_or(0).saturating_sub(200)..][..400.min(body.len())]);
    }

    // A torn last line, as a run that crashed mid-append leaves: the page
    // still renders every whole attempt.
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .open(run_dir.join("attempts.jsonl"))
        .unwrap();
    journal.write_all(b"{\"number\": 6, \"verd").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let (status, page) = served.get(&format!("/runs/{id}"));
    assert_eq!(status, 200);
    assert_eq!(page.matches("<tr id=\"attempt-").count(), 5);
    assert_eq!(browser.eval(ROWS), 5);
}

fn wait_for(browser: &mut Browser, condition: &str, seconds: u64) {
    let start = Instant::now();
    while browser.eval(condition) != true {
        assert!(
            start.elapsed() < Duration::from_secs(seconds),
            "never: {condition}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The screenshot goes beside the test's build, and into the docs when
/// `RATCHET_DOCS_SHOTS=1` asks for it (docs/guide.md shows it).
fn save_screenshot(png: &[u8]) {
    let image = png::Decoder::new(std::io::Cursor::new(png))
        .read_info()
        .unwrap();
    assert!(
        image.info().width >= 1000,
        "screenshot {}px wide",
        image.info().width
    );
    std::fs::write(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-live.png"),
        png,
    )
    .unwrap();
    if std::env::var("RATCHET_DOCS_SHOTS").is_ok_and(|v| v == "1") {
        std::fs::write(repo_root().join("docs/images/serve-live.png"), png).unwrap();
    }
}
