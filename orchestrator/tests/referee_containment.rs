//! The referee's containment of servers that try to get out of their
//! trial: work moved to another core (by the server, a helper thread, a
//! forked child or an SQPOLL thread), a daemon left behind, a server that
//! reads every environment it can reach, and a ratchet SIGKILLed while its
//! servers are rationed. They belong together because each checks what a
//! server can no longer do or leave, not what it answered.

mod common;

use common::referee::{arm, judge_mode, reasons};
use common::*;

/// A server that tries to work on another core is either rejected (its
/// gate names `off_core`, or it cannot start) or contained: where a cpuset
/// confines it, its attempt fails and every nanosecond it is scored on ran
/// on the SUT core. Never is it scored with off-core work.
fn assert_never_scored_off_core(mode: &str) {
    let _g = exclusive();
    let report = judge_mode(mode);
    let gate = &arm(&report, 1)["gate"];
    let r = reasons(&report, 1);
    if gate["passed"] == false {
        assert!(
            r.iter()
                .any(|x| x == "off_core" || x == "no_listen" || x == "server_exited"),
            "{mode}: failed for another reason: {r:?}"
        );
        return;
    }
    let containment = report["environment"]["containment"].as_str().unwrap();
    assert!(
        containment.contains("cpuset") && !containment.starts_with("warning"),
        "{mode} passed the gate without a cpuset to contain it: {containment}"
    );
    for t in report["trials"][1].as_array().unwrap() {
        assert_eq!(t["meter_delta"]["off_core_ns"], 0, "{mode}: {t}");
    }
}

/// Without cgroups (as on a host that has none), nothing confines a server
/// to its core: the off-core counter (all task-clock minus the SUT core's)
/// must then catch it, and the result must say it was not contained.
#[test]
fn without_cgroups_off_core_work_fails_the_gate_and_the_result_warns() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let bad = faulty_arm("off_core");
    let (report, _) = compare_json_env(
        &ws.path().join("harness.toml"),
        &[&ok, &bad],
        6,
        &[],
        &[("RATCHET_CGROUPS", "off")],
    );
    assert!(
        reasons(&report, 1).contains(&"off_core".to_string()),
        "{:?}",
        reasons(&report, 1)
    );
    let containment = report["environment"]["containment"].as_str().unwrap();
    assert!(
        containment.starts_with("warning: containment"),
        "{containment}"
    );
}

#[test]
fn a_server_that_moves_itself_off_core_is_rejected_or_contained() {
    assert_never_scored_off_core("off_core");
}

#[test]
fn a_helper_thread_on_another_core_is_rejected_or_contained() {
    assert_never_scored_off_core("thread_off_core");
}

#[test]
fn a_forked_child_serving_from_another_core_is_rejected_or_contained() {
    assert_never_scored_off_core("fork_off_core");
}

#[test]
fn an_sqpoll_thread_on_another_core_is_rejected_or_contained() {
    assert_never_scored_off_core("sqpoll_off_core");
}

/// A server that leaves a daemon (a grandchild in its own session) behind
/// is contained: the daemon dies with the trial's cgroup.
#[test]
fn a_daemon_left_by_a_server_dies_with_its_trial() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let open = open_dir();
    let pidfile = open.path().join("daemon.pid");
    let ok = faulty_arm("ok");
    let bad = format!(
        "cmd:{} --mode escape --pidfile {}",
        faulty_server().display(),
        pidfile.display()
    );
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &bad], 6, &[]);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .expect("the fixture left a daemon")
        .trim()
        .parse()
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z"),
        "the daemon {pid} outlived the comparison: {stat}"
    );
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&pidfile.display().to_string()))
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
    assert!(!report["environment"]["containment"]
        .as_str()
        .unwrap()
        .starts_with("warning"));
}

/// A server that prints every environment it can reach sees no key, and
/// what it printed reaches no output of ratchet with one in it.
#[test]
fn a_server_sees_no_key_and_its_output_carries_none() {
    let _g = exclusive();
    let key = "sk-ratchet-test-0123456789abcdef";
    let ws = temp_workspace("[trial]\nready_timeout_ms = 500\n");
    let open = open_dir();
    let seen = open.path().join("seen.txt");
    let ok = faulty_arm("ok");
    let bad = format!(
        "cmd:{} --mode print_env --pidfile {}",
        faulty_server().display(),
        seen.display()
    );
    let (report, out) = compare_json_env(
        &ws.path().join("harness.toml"),
        &[&ok, &bad],
        6,
        &[],
        &[("OPENAI_API_KEY", key), ("RATCHET_TEST_SECRET_TOKEN", key)],
    );
    let raw = std::fs::read_to_string(&seen).expect("the fixture wrote what it saw");
    assert!(raw.contains("env: PATH="), "{raw}");
    assert!(raw.contains("parent env:"), "{raw}");
    assert!(!raw.contains(key), "the server saw the key:\n{raw}");
    let detail = arm(&report, 1)["gate"]["detail"].to_string();
    assert!(detail.contains("env: PATH="), "{detail}");
    for text in [
        report.to_string(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    ] {
        assert!(!text.contains(key), "the key reached ratchet's output");
    }
}

/// The cgroups `ratchet/<pid>-...` that process `pid` made, in every
/// mounted hierarchy.
fn cgroups_of(pid: u32) -> Vec<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let mut found = Vec::new();
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !f[2].starts_with("cgroup") {
            continue;
        }
        let parent = std::path::Path::new(f[1]).join("ratchet");
        for e in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{pid}-"))
            {
                found.push(e.path());
            }
        }
    }
    found
}

/// A SIGKILLed ratchet runs no destructor: its servers die with it (parent
/// death signal) and the next ratchet removes the cgroups it left, the
/// rationing group among them, so no quota and no process outlives it.
#[test]
fn rationing_is_torn_down_after_ratchet_is_killed() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let mut child = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", &ok, &ok, "--blocks", "12"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = std::time::Instant::now();
    let ration = loop {
        if let Some(p) = cgroups_of(pid)
            .into_iter()
            .find(|p| p.to_string_lossy().ends_with("-ration"))
        {
            break p;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "no rationing group appeared for ratchet {pid}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Let the servers join it and take load.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let members = std::fs::read_to_string(ration.join("cgroup.procs")).unwrap();
    assert!(
        !members.trim().is_empty(),
        "no server in {}",
        ration.display()
    );
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for m in members.lines() {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", m.trim())).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z"),
            "server {m} outlived ratchet: {stat}"
        );
    }
    assert!(!cgroups_of(pid).is_empty(), "nothing was left to clean up");
    let doctor = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .arg("doctor")
        .output()
        .unwrap();
    let left = cgroups_of(pid);
    assert!(
        left.is_empty(),
        "cgroups of the killed ratchet survived the next one: {left:?}\n{}",
        String::from_utf8_lossy(&doctor.stdout)
    );
}
