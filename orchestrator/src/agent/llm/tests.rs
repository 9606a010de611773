//! The API agents against a local double, for what no real server here
//! can do on demand: rate limits, upstream errors, slow and broken bodies.
//! Everything a real server can show is tested against the local model
//! server in `tests/local_model.rs`.

use super::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One canned answer of the fake endpoint.
struct Canned {
    status: u16,
    body: String,
    delay_ms: u64,
}

fn ok(body: Value) -> Canned {
    Canned {
        status: 200,
        body: body.to_string(),
        delay_ms: 0,
    }
}

fn status(code: u16) -> Canned {
    Canned {
        status: code,
        body: "{\"error\":\"nope\"}".into(),
        delay_ms: 0,
    }
}

/// A local HTTP server that answers each request with the next canned
/// response and records what it was sent.
fn fake_endpoint(answers: Vec<Canned>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut answers = answers.into_iter();
        loop {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut len = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).ok();
            // The double states no context window and has no tokenizer.
            if head.contains("/models") || head.contains("/tokenize") {
                let _ = write!(
                    stream,
                    "HTTP/1.1 404 X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                continue;
            }
            let Some(answer) = answers.next() else {
                return;
            };
            log.lock()
                .unwrap()
                .push(format!("{head}\n{}", String::from_utf8_lossy(&body)));
            std::thread::sleep(Duration::from_millis(answer.delay_ms));
            let _ = write!(
                stream,
                "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                answer.status,
                answer.body.len(),
                answer.body
            );
        }
    });
    (url, seen)
}

const FILE: &str = "int main(void)\n{\n\treturn 0;\n}\n";

fn context() -> ProposalContext {
    let files = BTreeMap::from([("treatment/server.c".to_string(), FILE.to_string())]);
    ProposalContext::for_tests(files, std::path::Path::new(""))
}

const GOOD: &str = "HYPOTHESIS: return early\nCATEGORY: test\n<<<<<<< SEARCH treatment/server.c\n\treturn 0;\n=======\n\treturn 1;\n>>>>>>> REPLACE\n";
const BAD_SEARCH: &str = "HYPOTHESIS: return early\n<<<<<<< SEARCH treatment/server.c\n\treturn 7;\n=======\n\treturn 1;\n>>>>>>> REPLACE\n";

fn openai_body(text: &str) -> Value {
    json!({"choices": [{"message": {"role": "assistant", "content": text}}], "usage": {"prompt_tokens": 1000, "completion_tokens": 100}})
}

fn agent(protocol: Protocol, url: &str, key_env: &str) -> LlmAgent {
    std::env::set_var(key_env, "sk-test-SECRET");
    LlmAgent::new(
        "test",
        protocol,
        ApiAgentConfig {
            base_url: Some(url.into()),
            model: Some("test-model".into()),
            api_key_env: Some(key_env.into()),
            timeout_s: Some(1),
            max_retries: Some(2),
            backoff_ms: Some(10),
            repair_rounds: Some(1),
            reply_format: ReplyFormat::Text,
            ..Default::default()
        },
    )
    .unwrap()
}

fn failure(r: Result<Proposed>) -> AgentFailure {
    match r {
        Err(e) => match e.downcast::<AgentFailure>() {
            Ok(f) => f,
            Err(e) => panic!("not an agent failure: {e:#}"),
        },
        Ok(_) => panic!("expected a failure"),
    }
}

#[test]
fn openai_reply_becomes_a_proposal_with_usage_and_cost() {
    let (url, seen) = fake_endpoint(vec![ok(openai_body(GOOD))]);
    let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_OK");
    let Proposed::Edits(p) = a.propose(&context()).unwrap() else {
        panic!()
    };
    assert_eq!(p.hypothesis, "return early");
    assert_eq!(p.edits.len(), 1);
    let u = p.usage.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (1000, 100));
    assert!((u.cost_usd - (1000.0 * 2.5 + 100.0 * 10.0) / 1e6).abs() < 1e-12);
    let req = &seen.lock().unwrap()[0];
    assert!(req.starts_with("POST /chat/completions"), "{req}");
    assert!(req
        .to_ascii_lowercase()
        .contains("authorization: bearer sk-test-secret"));
    assert!(req.contains("test-model") && req.contains("Champion source"));
}

#[test]
fn anthropic_speaks_the_messages_protocol() {
    let body = json!({"content": [{"type": "text", "text": GOOD}], "usage": {"input_tokens": 10, "output_tokens": 5}});
    let (url, seen) = fake_endpoint(vec![ok(body)]);
    let mut a = agent(Protocol::Anthropic, &url, "RATCHET_TEST_KEY_ANTHROPIC");
    let Proposed::Edits(p) = a.propose(&context()).unwrap() else {
        panic!()
    };
    assert_eq!(p.usage.unwrap().input_tokens, 10);
    let req = seen.lock().unwrap()[0].to_ascii_lowercase();
    assert!(req.starts_with("post /v1/messages"), "{req}");
    assert!(
        req.contains("x-api-key: sk-test-secret") && req.contains("anthropic-version: 2023-06-01")
    );
}

#[test]
fn rate_limits_and_server_errors_are_retried() {
    let (url, seen) = fake_endpoint(vec![status(429), status(503), ok(openai_body(GOOD))]);
    let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_RETRY");
    assert!(matches!(a.propose(&context()).unwrap(), Proposed::Edits(_)));
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[test]
fn retries_are_bounded() {
    let (url, seen) = fake_endpoint(vec![status(500), status(500), status(500), status(500)]);
    let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_BOUND");
    let f = failure(a.propose(&context()));
    assert!(
        matches!(&f, AgentFailure::Unavailable { message, .. } if message.contains("gave up after 2 retries")),
        "{f}"
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[test]
fn a_slow_endpoint_times_out() {
    let slow = || Canned {
        status: 200,
        body: openai_body(GOOD).to_string(),
        delay_ms: 1500,
    };
    let (url, _) = fake_endpoint(vec![slow(), slow(), slow()]);
    let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_SLOW");
    let f = failure(a.propose(&context()));
    assert!(f.to_string().contains("timed out"), "{f}");
}

#[test]
fn client_errors_are_not_retried_and_the_key_is_not_echoed() {
    let (url, seen) = fake_endpoint(vec![status(401)]);
    let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_401");
    let f = failure(a.propose(&context()));
    assert!(f.to_string().contains("401"), "{f}");
    assert!(!f.to_string().contains("sk-test-SECRET"));
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[test]
fn a_body_that_is_not_a_reply_is_malformed() {
    let (url, _) = fake_endpoint(vec![Canned {
        status: 200,
        body: "<html>proxy error</html>".into(),
        delay_ms: 0,
    }]);
    let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_HTML");
    assert!(matches!(
        failure(a.propose(&context())),
        AgentFailure::Malformed { .. }
    ));
}

#[test]
fn an_edit_that_does_not_apply_goes_back_with_the_error() {
    let (url, seen) = fake_endpoint(vec![ok(openai_body(BAD_SEARCH)), ok(openai_body(GOOD))]);
    let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_REPAIR");
    let Proposed::Edits(p) = a.propose(&context()).unwrap() else {
        panic!()
    };
    assert_eq!(
        p.usage.unwrap().input_tokens,
        2000,
        "both rounds are paid for"
    );
    let second = &seen.lock().unwrap()[1];
    assert!(
        second.contains("could not be used") && second.contains("search text not found"),
        "{second}"
    );
}

#[test]
fn repairs_are_bounded_too() {
    let (url, _) = fake_endpoint(vec![
        ok(openai_body("no format")),
        ok(openai_body("still none")),
    ]);
    let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_REPAIR2");
    let f = failure(a.propose(&context()));
    assert!(
        matches!(&f, AgentFailure::Malformed { message, .. } if message.contains("1 repair rounds")),
        "{f}"
    );
}

#[test]
fn a_missing_key_names_the_variable() {
    let mut a = agent(
        Protocol::OpenAi,
        "http://127.0.0.1:9",
        "RATCHET_TEST_KEY_MISSING",
    );
    std::env::remove_var("RATCHET_TEST_KEY_MISSING");
    let f = failure(a.propose(&context()));
    assert!(f.to_string().contains("RATCHET_TEST_KEY_MISSING"), "{f}");
}
