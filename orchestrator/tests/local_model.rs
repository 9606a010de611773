//! The API agents against a real server with a real model: llama.cpp's own
//! HTTP server and SmolLM2-135M-Instruct, run by `scripts/local-model.sh`
//! on one thread. Whatever such a server can show is tested here; the
//! doubles in `agent/llm/tests.rs` stay only for upstream rate limits and
//! error bodies.

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A model server on a free port, stopped (SIGTERM) when dropped.
struct LocalModel {
    child: Child,
    port: u16,
}

impl LocalModel {
    fn start(ctx: u32, api_key: Option<&str>) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new(repo_root().join("scripts/local-model.sh"));
        cmd.args([
            "serve",
            "--port",
            &port.to_string(),
            "--ctx",
            &ctx.to_string(),
        ]);
        if let Some(k) = api_key {
            cmd.args(["--api-key", k]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("scripts/local-model.sh");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let start = Instant::now();
        loop {
            let line = lines
                .next()
                .expect("the model server ended before READY")
                .unwrap();
            if line.starts_with("READY") {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(180), "no READY");
        }
        Self { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGTERM, as `scripts/local-model.sh stop` sends it: the server must
    /// end within seconds even with a request in flight.
    fn stop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                self.child.kill().unwrap();
                self.child.wait().unwrap();
                panic!("the model server did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for LocalModel {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// What a fixture's prompt holds besides the rules.
#[derive(Clone, Copy, PartialEq)]
enum Fixture {
    /// The real treatment (about 2,000 tokens of C), for runs that measure.
    Real,
    /// A treatment of a few lines, so that a request costs seconds, not a
    /// minute of the model reading C on one thread.
    Tiny,
}

const TINY: &str = "#include <stdio.h>\n\nint main(void)\n{\n\tputs(\"hello\");\n\treturn 0;\n}\n";

/// A fixture repository whose `[agents.local]` and `[agents.anthropic]`
/// point at `server`, with `agent` settings appended to both; with
/// `lessons`, the project's own knowledge base, far more than a 4k or 8k
/// window holds.
fn repo_for(
    server: &LocalModel,
    agent: &str,
    fixture: Fixture,
    lessons: bool,
) -> tempfile::TempDir {
    let url = server.url();
    let no_key = if agent.contains("api_key_env") {
        ""
    } else {
        "api_key_env = \"\"\n"
    };
    let repo = fixture_repo(
        &format!(
            "\n[agents.local]\nbase_url = \"{url}/v1\"\n{agent}\n\
             [agents.anthropic]\nbase_url = \"{url}\"\nmodel = \"smollm2\"\n{no_key}\
             price_input_per_mtok = 0.0\nprice_output_per_mtok = 0.0\n{agent}\n"
        ),
        &[],
    );
    let root = repo.path();
    if fixture == Fixture::Tiny {
        std::fs::write(root.join("treatment/server.c"), TINY).unwrap();
        commit_all(root, "a tiny treatment");
    }
    if lessons {
        let kb = root.join("knowledge-base");
        std::fs::copy(
            repo_root().join("knowledge-base/seed.md"),
            kb.join("seed.md"),
        )
        .unwrap();
        // The project's recorded lessons, each in its run's directory.
        for run in std::fs::read_dir(repo_root().join("results")).unwrap() {
            let from = run.unwrap().path();
            if !from.join("lessons.jsonl").is_file() {
                continue;
            }
            let to = root.join("results").join(from.file_name().unwrap());
            std::fs::create_dir_all(&to).unwrap();
            std::fs::copy(from.join("lessons.jsonl"), to.join("lessons.jsonl")).unwrap();
        }
    }
    repo
}

/// `ratchet propose`: its output, and the samples it wrote.
fn propose(root: &Path, args: &[&str], envs: &[(&str, &str)]) -> (Output, Vec<Value>) {
    let out_file = root.join("samples.json");
    let out = Command::new(ratchet())
        .arg("--config")
        .arg(root.join("harness.toml"))
        .arg("propose")
        .args(args)
        .arg("--out")
        .arg(&out_file)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(out_file).unwrap()).unwrap();
    (out, doc["samples"].as_array().unwrap().clone())
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn tokens(sample: &Value, field: &str) -> u64 {
    sample["usage"][field].as_u64().unwrap_or(0)
}

#[test]
fn both_protocols_answer_end_to_end_with_usage_priced_at_zero() {
    let _g = exclusive();
    let server = LocalModel::start(2048, None);
    let repo = repo_for(
        &server,
        "max_tokens = 96\nrepair_rounds = 0",
        Fixture::Tiny,
        false,
    );
    for agent in ["local", "anthropic"] {
        let (_, samples) = propose(repo.path(), &["--agent", agent], &[]);
        let s = &samples[0];
        assert_ne!(s["outcome"], "agent_error", "{agent}: {s:#}");
        assert_eq!(s["rounds"].as_array().unwrap().len(), 1, "{agent}: {s:#}");
        assert!(!s["rounds"][0]["reply"].as_str().unwrap().is_empty());
        assert!(tokens(s, "input_tokens") > 300, "{agent}: {s:#}");
        assert!(tokens(s, "output_tokens") > 0, "{agent}: {s:#}");
        assert_eq!(s["usage"]["cost_usd"], 0.0, "{agent}");
    }
}

#[test]
fn a_reply_cut_at_max_tokens_goes_back_saying_so() {
    let _g = exclusive();
    let server = LocalModel::start(2048, None);
    let repo = repo_for(
        &server,
        "max_tokens = 12\nrepair_rounds = 1",
        Fixture::Tiny,
        false,
    );
    let (_, samples) = propose(repo.path(), &["--reply-format", "json"], &[]);
    let s = &samples[0];
    assert_eq!(s["outcome"], "unparsed", "{s:#}");
    assert_eq!(
        s["rounds"].as_array().unwrap().len(),
        2,
        "a repair round was sent"
    );
    let error = s["error"].as_str().unwrap();
    assert!(
        error.contains("cut at the token limit (12 tokens)") && error.contains("after 1 repair"),
        "{error}"
    );
}

#[test]
fn a_reply_that_is_not_an_edit_is_malformed_after_its_repair_round() {
    let _g = exclusive();
    let server = LocalModel::start(2048, None);
    let repo = repo_for(
        &server,
        "max_tokens = 160\nrepair_rounds = 1\ntemperature = 0.0",
        Fixture::Tiny,
        false,
    );
    let (_, samples) = propose(repo.path(), &["--reply-format", "text"], &[]);
    let s = &samples[0];
    assert_eq!(s["outcome"], "unparsed", "{s:#}");
    let rounds = s["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "the repair round was sent: {s:#}");
    assert!(s["error"]
        .as_str()
        .unwrap()
        .contains("after 1 repair rounds"));
}

/// `ratchet propose --prompt-only`: the prompt's size by the server's count.
fn preview(root: &Path) -> Value {
    let out = Command::new(ratchet())
        .arg("--config")
        .arg(root.join("harness.toml"))
        .args(["propose", "--prompt-only"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn prompts_are_cut_to_4k_and_8k_windows_and_recut_when_the_window_was_wrong() {
    let _g = exclusive();
    let settings = "max_tokens = 48\nrepair_rounds = 0";
    for ctx in [4096u64, 8192] {
        let server = LocalModel::start(ctx as u32, None);
        let repo = repo_for(&server, settings, Fixture::Real, true);
        let p = preview(repo.path());
        assert_eq!(p["window"], ctx);
        let prompt = p["prompt_tokens"]
            .as_u64()
            .expect("llama.cpp counts tokens");
        let reply = p["reply_tokens"].as_u64().unwrap();
        assert!(
            prompt + reply <= ctx,
            "{prompt} + {reply} tokens in a {ctx}-token window"
        );
        assert!(prompt > ctx / 2, "only {prompt} of {ctx} tokens used");
        assert_eq!(p["cut"], true, "the lessons alone exceed {ctx} tokens");
        let text = p["prompt"].as_str().unwrap();
        assert!(
            text.contains("static void on_accept("),
            "the source is whole"
        );
        let format = text.rfind("# Reply format").unwrap();
        assert!(
            format > text.find("# Lessons").unwrap(),
            "the reply format comes last"
        );
    }
    // A configured window four times the server's: refused once, then cut
    // again to the counts in the server's refusal, and answered.
    let server = LocalModel::start(2048, None);
    let repo = repo_for(
        &server,
        &format!("{settings}\ncontext_tokens = 8192"),
        Fixture::Tiny,
        true,
    );
    let (_, samples) = propose(repo.path(), &[], &[]);
    let s = &samples[0];
    assert_ne!(s["outcome"], "agent_error", "{s:#}");
    assert!(tokens(s, "input_tokens") <= 2048, "{s:#}");
    // A window too small for the source itself: a named reason, nothing sent.
    let server = LocalModel::start(1024, None);
    let repo = repo_for(&server, settings, Fixture::Real, false);
    let (_, samples) = propose(repo.path(), &[], &[]);
    let s = &samples[0];
    assert_eq!(s["outcome"], "agent_error", "{s:#}");
    assert!(
        s["error"]
            .as_str()
            .unwrap()
            .contains("the prompt's required parts"),
        "{s:#}"
    );
}

#[test]
fn a_wrong_key_is_one_clear_error_and_never_echoed() {
    let _g = exclusive();
    let server = LocalModel::start(2048, Some("sk-right-key-0451"));
    let repo = repo_for(
        &server,
        "api_key_env = \"RATCHET_TEST_LOCAL_KEY\"\nmax_retries = 3\nbackoff_ms = 50",
        Fixture::Tiny,
        false,
    );
    let wrong = "sk-wrong-SECRET-9876";
    let (out, samples) = propose(repo.path(), &[], &[("RATCHET_TEST_LOCAL_KEY", wrong)]);
    let s = &samples[0];
    assert_eq!(s["outcome"], "agent_error", "{s:#}");
    let error = s["error"].as_str().unwrap();
    assert!(
        error.contains("401") && !error.contains("retries"),
        "{error}"
    );
    let everything = format!("{}{s}", show(&out));
    assert!(!everything.contains(wrong), "the key leaked");
}

/// Journal lines of a run, waiting up to `limit` for `n`.
fn wait_for_attempts(run_dir: &Path, n: usize, limit: Duration) {
    let start = Instant::now();
    let file = run_dir.join("attempts.jsonl");
    while std::fs::read_to_string(&file).map_or(0, |t| t.lines().count()) < n {
        assert!(start.elapsed() < limit, "no {n} attempts in {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_server_stopped_mid_run_gives_agent_errors_and_the_run_resumes() {
    let _g = exclusive();
    let key = "sk-local-NEVER-IN-A-FILE-31337";
    let mut server = LocalModel::start(4096, Some(key));
    let repo = repo_for(
        &server,
        "api_key_env = \"RATCHET_TEST_LOCAL_KEY\"\nmax_tokens = 96\nrepair_rounds = 0\n\
         max_retries = 1\nbackoff_ms = 100",
        Fixture::Real,
        false,
    );
    let root = repo.path();
    let child = Command::new(ratchet())
        .arg("--config")
        .arg(root.join("harness.toml"))
        .args(["run", "--agent", "local", "--max-iterations", "3"])
        .env("RATCHET_TEST_LOCAL_KEY", key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let results = root.join("results");
    let start = Instant::now();
    while !results.exists() || std::fs::read_dir(&results).unwrap().count() == 0 {
        assert!(start.elapsed() < Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(100));
    }
    let (id, run_dir) = only_run(root);
    wait_for_attempts(&run_dir, 1, Duration::from_secs(400));
    server.stop();
    let out = child.wait_with_output().unwrap();
    let v = verdicts(&run_dir);
    assert_eq!(v.len(), 3, "{}", show(&out));
    assert_ne!(v[0], "agent_error", "{}", verdict_details(&run_dir));
    assert_eq!(v[1..], ["agent_error", "agent_error"]);
    let detail = attempts(&run_dir)[1]["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.contains("gave up after 1 retries"), "{detail}");
    assert!(!attempts(&run_dir)[0]["replies"]
        .as_array()
        .unwrap()
        .is_empty());
    // An agent that gave nothing teaches nothing about the server.
    let lessons = run_dir.join("lessons.jsonl");
    let taught: Vec<u64> = std::fs::read_to_string(lessons)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["attempt"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(
        !taught.contains(&2) && !taught.contains(&3),
        "lessons of agent errors: {taught:?}"
    );
    let worktree = PathBuf::from(run_json(&run_dir)["worktree"].as_str().unwrap());
    assert_eq!(git(&worktree, &["status", "--porcelain"]), "");

    // The server back, the run resumes where it stopped.
    let server = LocalModel::start(4096, Some(key));
    std::fs::write(
        root.join("harness.toml"),
        std::fs::read_to_string(root.join("harness.toml"))
            .unwrap()
            .replace(&server_url_in(root), &format!("{}/v1", server.url())),
    )
    .unwrap();
    let out = ratchet_run(
        root,
        &["--resume", &id, "--max-iterations", "4"],
        &[("RATCHET_TEST_LOCAL_KEY", key)],
    );
    let v = verdicts(&run_dir);
    assert_eq!(v.len(), 4, "{}", show(&out));
    assert_ne!(v[3], "agent_error", "{}", verdict_details(&run_dir));
    let numbers: Vec<u64> = attempts(&run_dir)
        .iter()
        .map(|a| a["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
    let grep = Command::new("grep")
        .args(["-r", "-l", key])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        grep.stdout.is_empty(),
        "the key is in {}",
        String::from_utf8_lossy(&grep.stdout)
    );
    assert!(!show(&out).contains(key));
}

/// The `[agents.local]` base URL a fixture's configuration holds.
fn server_url_in(root: &Path) -> String {
    let text = std::fs::read_to_string(root.join("harness.toml")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("base_url") && l.ends_with("/v1\""))
        .unwrap();
    line.split('"').nth(1).unwrap().to_string()
}
