//! Your own server (docs/your-server.md). The worked example in
//! examples/keepalive-cpp, a C++ keep-alive server over IPv6 with its own
//! build, contract and playbook, is compared and run from its own
//! configuration, with every response of every connection judged; and
//! listeners of every family are found: a dual-stack Go server started as
//! `:PORT` is measured over IPv4 and IPv6, while a server on the wrong
//! family is `no_listen`, naming the address it was expected on.

mod common;

use common::example::{check, compare, example_repo, run_three};
use common::referee::{arm, reasons};
use common::*;
use std::path::PathBuf;
use std::process::Command;

const EXAMPLE: &str = "examples/keepalive-cpp";

/// A playbook entry that breaks the example, written against its source.
fn breaking(order: u32, id: &str, path: &str, search: &str, replace: &str) -> String {
    format!(
        "order = {order}\nid = \"{id}\"\ncategory = \"broken\"\nhypothesis = \"breaks the contract\"\n\n\
         [[edits]]\npath = \"{EXAMPLE}/server/src/{path}\"\nsearch = '''\n{search}'''\nreplace = '''\n{replace}'''\n"
    )
}

/// The example as a user runs it: `compare` and a 3-attempt `run` from its
/// own harness.toml, beside (not in) the repository's root, with no control.
#[test]
fn the_worked_example_compares_and_runs_from_its_own_config() {
    let _g = exclusive();
    let (dir, config) = example_repo(EXAMPLE, &[]);
    let report = compare(&config, &["treatment", "playbook:single-send-response"]);
    for i in 0..2 {
        let a = arm(&report, i);
        assert_eq!(a["gate"]["passed"], true, "{a}");
        // Eight requests a connection: at least a read and a send for each.
        let calls = a["syscalls_per_connection"].as_f64().unwrap();
        assert!(calls > 16.0, "{calls} system calls a connection: {a}");
    }
    let (log, attempts, run) = run_three(dir.path(), EXAMPLE, &config);
    assert!(log.contains("no frozen reference"), "{log}");
    let ids: Vec<String> =
        std::fs::read_dir(dir.path().join(EXAMPLE).join("knowledge-base/playbook"))
            .unwrap()
            .map(|e| {
                e.unwrap()
                    .path()
                    .file_stem()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
    for a in &attempts {
        assert!(
            a["vs_control"].is_null(),
            "no control, no ratio to one: {a}"
        );
        assert!(
            ids.iter()
                .any(|id| a["idea"].as_str().unwrap_or("").contains(id.as_str())),
            "an idea of the example's own playbook: {a}"
        );
    }
    assert_eq!(run["config"]["run"]["control"], "none");
}

/// Each of eight responses on a connection is judged as it arrives, and the
/// close after them: a wrong date, a connection closed after its first
/// response, and a request answered twice each fail the gate by name.
#[test]
fn every_response_of_a_keep_alive_connection_is_judged() {
    let _g = exclusive();
    let entries = [
        (
            "utc",
            breaking(
                90,
                "utc",
                "http/response.cpp",
                "    strftime(text, sizeof text, \"%a, %d %b %Y %H:%M:%S GMT\", &parts);\n",
                "    strftime(text, sizeof text, \"%a, %d %b %Y %H:%M:%S UTC\", &parts);\n",
            ),
        ),
        (
            "close-early",
            breaking(
                91,
                "close-early",
                "main.cpp",
                "        start = end + 4;\n    }\n",
                "        start = end + 4;\n        return false;\n    }\n",
            ),
        ),
        (
            "twice",
            breaking(
                92,
                "twice",
                "main.cpp",
                "        if (!respond(c))\n",
                "        if (!respond(c) || !respond(c))\n",
            ),
        ),
    ];
    let playbook: Vec<(&str, &str)> = entries.iter().map(|(n, e)| (*n, e.as_str())).collect();
    let (_dir, config) = example_repo(EXAMPLE, &playbook);
    let report = check(
        &config,
        &[
            "treatment",
            "playbook:utc",
            "playbook:close-early",
            "playbook:twice",
        ],
    );
    assert_eq!(arm(&report, 0)["gate"]["passed"], true, "{report}");
    for (i, reason) in [(1, "wrong_bytes"), (2, "truncated"), (3, "extra_bytes")] {
        assert_eq!(
            arm(&report, i)["gate"]["passed"],
            false,
            "{}",
            arm(&report, i)
        );
        assert!(
            reasons(&report, i).iter().any(|r| r == reason),
            "arm {i}: expected {reason}, got {:?}",
            reasons(&report, i)
        );
    }
}

/// A Go server listening as Go listens by default (`":PORT"`, one
/// dual-stack socket on `[::]`), or on one family only.
fn go_server(network: &str, host: &str) -> String {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ratchet-go-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("main.go");
        std::fs::write(&src, GO_SERVER).unwrap();
        let status = Command::new("go")
            .current_dir(&dir)
            .args(["build", "-o", "listener", "main.go"])
            .env("GOTOOLCHAIN", "local")
            .env("GOCACHE", dir.join("cache"))
            .env("GOPATH", dir.join("path"))
            .env("GO111MODULE", "off")
            .status()
            .unwrap();
        assert!(status.success(), "the Go test server did not build");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir.join("listener")
    });
    format!("cmd:{} -net={network} -host={host}", bin.display())
}

const GO_SERVER: &str = r#"package main

import (
	"flag"
	"net"
)

var response = []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

func main() {
	network := flag.String("net", "tcp", "tcp, tcp4 or tcp6")
	host := flag.String("host", "", "empty: every address")
	port := flag.String("port", "", "the port")
	flag.Parse()
	ln, err := net.Listen(*network, net.JoinHostPort(*host, *port))
	if err != nil {
		panic(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go func(c net.Conn) {
			defer c.Close()
			buf := make([]byte, 1024)
			if _, err := c.Read(buf); err == nil {
				c.Write(response)
			}
		}(c)
	}
}
"#;

fn family_workspace(family: &str) -> tempfile::TempDir {
    temp_workspace(&format!(
        "[target]\nfamily = \"{family}\"\n[trial]\nready_timeout_ms = 1000\n[gate]\nmin_completed = 50\n"
    ))
}

#[test]
fn a_dual_stack_go_server_is_measured_over_either_family() {
    let _g = exclusive();
    let dual = go_server("tcp", "");
    for family in ["ipv4", "ipv6"] {
        let ws = family_workspace(family);
        let report = check(&ws.path().join("harness.toml"), &[&dual]);
        let a = arm(&report, 0);
        assert_eq!(a["gate"]["passed"], true, "{family}: {a}");
        assert!(
            a["gate"]["completed"].as_u64().unwrap() > 0,
            "{family}: {a}"
        );
    }
}

#[test]
fn a_server_on_the_wrong_family_is_no_listen_naming_the_address() {
    let _g = exclusive();
    for (family, network, host, expected) in [
        ("ipv6", "tcp4", "127.0.0.1", "[::1]:"),
        ("ipv4", "tcp6", "::1", "127.0.0.1:"),
        // IPv6's wildcard with IPV6_V6ONLY (Go's "tcp6"): /proc shows `::`
        // as it shows a dual-stack listener, and only a connect tells.
        ("ipv4", "tcp6", "", "127.0.0.1:"),
    ] {
        let ws = family_workspace(family);
        let wrong = go_server(network, host);
        let right = go_server("tcp", "");
        let report = check(&ws.path().join("harness.toml"), &[&right, &wrong]);
        assert_eq!(arm(&report, 0)["gate"]["passed"], true, "{report}");
        assert!(
            reasons(&report, 1).contains(&"no_listen".to_string()),
            "{family} against {network} {host:?}: {:?}",
            reasons(&report, 1)
        );
        let detail = arm(&report, 1)["gate"]["detail"].to_string();
        assert!(detail.contains(expected), "{detail}");
    }
}
