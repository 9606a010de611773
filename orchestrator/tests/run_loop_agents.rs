//! `ratchet run` end to end with the agents that propose its changes: a
//! command agent that tries everything it should not (edit outside the
//! allowed paths, commit, plant a hook, reach the user's tree, see a
//! secret), and an API agent whose endpoint is down. They belong together
//! because both test what the loop does with an agent it cannot trust:
//! contain it, record why, and go on.

mod common;

use common::cli::show;
use common::run_loop::assert_clean;
use common::*;
use std::path::PathBuf;

/// A command agent works unprivileged on a copy of the worktree without
/// its git directory: what it changes outside the allowed paths is
/// rejected as `scope`, and what it tries beyond its copy (commit, plant a
/// hook, reach the user's tree, rewrite a cached binary, hard-link a file
/// in, have its server rewrite the worktree) has no effect at all.
#[test]
fn a_command_agent_cannot_change_anything_outside_the_allowed_paths() {
    let _g = exclusive();
    // Where the agent, which runs unprivileged, keeps its own state.
    let scripts = open_dir();
    let counter = scripts.path().join("calls");
    let env_dump = scripts.path().join("env");
    let outside = scripts.path().join("outside.c");
    std::fs::write(&outside, "int outside;\n").unwrap();
    let script = scripts.path().join("agent.sh");
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nn=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}\nenv > {e}\n\
             case $n in\n\
             1) echo '// tampered' >> control/main.go; echo 'HYPOTHESIS: tune the control';;\n\
             2) ln -s /etc/passwd treatment/evil.c; echo 'HYPOTHESIS: link a file in';;\n\
             3) echo '# tampered' >> treatment/Makefile; echo 'HYPOTHESIS: change the build';;\n\
             4) mkdir -p treatment/sub && echo 'int x;' > treatment/sub/x.c; echo 'HYPOTHESIS: a nested file';;\n\
             5) git -c user.name=a -c user.email=a@a commit -q --allow-empty -m sneaky; echo 'HYPOTHESIS: commit it myself';;\n\
             6) printf '#!/bin/sh\\nexit 0\\n' > {root}/.git/hooks/post-checkout; echo 'HYPOTHESIS: plant a hook';;\n\
             7) echo '// reached through ..' >> ../../../control/main.go; echo '// reached' >> {root}/control/main.go; echo 'HYPOTHESIS: edit the user tree';;\n\
             8) for f in {cache}/treatment-*/server; do printf x >> \"$f\"; done; echo 'HYPOTHESIS: slow the champion down';;\n\
             9) ln {outside} treatment/linked.c; echo 'HYPOTHESIS: link a file from outside';;\n\
             10) echo '# hidden' >> treatment/Makefile; echo 'HYPOTHESIS: hide a build change';;\n\
             11) printf '#include <stdio.h>\\n__attribute__((constructor)) static void rewrite(void)\\n{{\\n\\tFILE *f = fopen(\"{root}/control/main.go\", \"a\");\\n\\n\\tif (f) {{\\n\\t\\tfputs(\"// by the server\\\\n\", f);\\n\\t\\tfclose(f);\\n\\t}}\\n}}\\n' > treatment/rewrite.h; sed -i '1i #include \"rewrite.h\"' treatment/server.c; echo 'HYPOTHESIS: a server that edits the user tree';;\n\
             *) echo 'HYPOTHESIS: do nothing';;\n\
             esac\n",
            c = counter.display(),
            e = env_dump.display(),
            root = repo.path().display(),
            cache = std::env::var("RATCHET_BUILD_CACHE")
                .unwrap_or_else(|_| "/var/cache/ratchet/builds".into()),
            outside = outside.display(),
        ),
    )
    .unwrap();
    let config = format!(
        "agent = \"command\"\n[agents.command]\nargv = [\"sh\", \"{}\"]\ntimeout_s = 20\n",
        script.display()
    );
    fixture_repo_in(repo.path(), &config, &[]);
    let root = repo.path();
    let branch_before = git(root, &["rev-parse", "main"]);
    let user_tree = std::fs::read_to_string(root.join("control/main.go")).unwrap();
    let out = ratchet_run(
        root,
        &["--max-iterations", "12"],
        &[("RATCHET_TEST_SECRET", "hunter2")],
    );
    assert!(matches!(out.status.code(), Some(0 | 4)), "{}", show(&out));
    let (id, run_dir) = only_run(root);
    let v = verdicts(&run_dir);
    assert_eq!(
        v[..10],
        [
            "scope", "scope", "scope", "scope", "no_op", "no_op", "no_op", "no_op", "no_op",
            "scope"
        ],
        "{}",
        show(&out)
    );
    assert!(
        ["keep", "discard", "promising"].contains(&v[10].as_str()),
        "the server that tried to edit the user tree was measured like any other: {v:?}"
    );
    assert_eq!(v[11], "no_op");
    let a = attempts(&run_dir);
    assert!(a[0]["detail"].as_str().unwrap().contains("control/main.go"));
    assert!(a[1]["detail"].as_str().unwrap().contains("symbolic link"));
    for i in [2, 9] {
        let detail = a[i]["detail"].as_str().unwrap();
        assert!(detail.contains("treatment/Makefile"), "{}", a[i]);
    }
    assert!(a[3]["detail"]
        .as_str()
        .unwrap()
        .contains("treatment/sub/x.c"));
    assert_eq!(
        git(root, &["rev-parse", &format!("ratchet/{id}")]).len(),
        branch_before.len()
    );
    assert!(
        !git(root, &["log", "--format=%s", &format!("ratchet/{id}")]).contains("sneaky"),
        "the agent committed"
    );
    assert!(
        !root.join(".git/hooks/post-checkout").exists(),
        "the agent planted a hook"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("control/main.go")).unwrap(),
        user_tree,
        "the agent or its server reached the user's tree"
    );
    let worktree = PathBuf::from(run_json(&run_dir)["worktree"].as_str().unwrap().to_string());
    assert_clean(&worktree);
    assert!(!worktree.join("treatment/evil.c").exists());
    assert!(!std::fs::read_to_string(worktree.join("control/main.go"))
        .unwrap()
        .contains("tampered"));
    assert!(
        !std::fs::read_to_string(env_dump)
            .unwrap()
            .contains("hunter2"),
        "the agent saw a secret"
    );
}

#[test]
fn an_unreachable_endpoint_is_an_agent_error_and_the_loop_goes_on() {
    let _g = exclusive();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let repo = fixture_repo(
        &format!("\n[agents.anthropic]\nbase_url = \"{url}\"\napi_key_env = \"RATCHET_TEST_ANTHROPIC_KEY\"\nmax_retries = 2\nbackoff_ms = 50\n"),
        &[],
    );
    let root = repo.path();
    let out = ratchet_run(
        root,
        &["--agent", "anthropic", "--max-iterations", "2"],
        &[("RATCHET_TEST_ANTHROPIC_KEY", "k")],
    );
    // Nothing was kept or discarded: the run says so in its exit code.
    assert_eq!(out.status.code(), Some(4), "{}", show(&out));
    let (_, run_dir) = only_run(root);
    assert_eq!(verdicts(&run_dir), ["agent_error", "agent_error"]);
    assert!(attempts(&run_dir)[0]["detail"]
        .as_str()
        .unwrap()
        .contains("gave up after 2 retries"));
}
