//! The target's build: its own command (`[target] build`) on a copy of
//! its sources, with or without an agent's edit written over them.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::sources::copy_sources;
use super::{cached_build, on_path, reachable, Built, Recipe};
use crate::bench::servers::secrets;
use crate::bench::servers::target::TargetConfig;

/// Builds the target's source in `src` with its own command.
pub fn build_target(
    src: &Path,
    target: &TargetConfig,
    cache: &Path,
    timeout: Duration,
) -> Result<Built> {
    let program = &target.build[0];
    if !on_path(program) {
        bail!("target.build: `{program}` not found on PATH (install it, or name the program that builds the server)");
    }
    let toolchain = target.toolchain_dirs()?;
    reachable(program, &toolchain).context("target.build")?;
    if target.io_uring && !Path::new("/usr/include/liburing.h").exists() {
        bail!("liburing.h not found (target.io_uring is set): install the Debian package liburing-dev (apt-get install liburing-dev)");
    }
    let src_abs = src
        .canonicalize()
        .with_context(|| format!("the server's source {}", src.display()))?;
    let globs = target.globs();
    let env = passed_env(&target.build_env);
    let recipe = Recipe {
        kind: "target",
        sources: &globs,
        argv: target.build.clone(),
        env: env.clone(),
        toolchain: &toolchain,
        binary: &target.binary,
    };
    cached_build(&recipe, &src_abs, cache, timeout, |copy, out| {
        let argv: Vec<String> = target
            .build
            .iter()
            .map(|a| a.replace("{out}", &out.to_string_lossy()))
            .collect();
        let mut c = Command::new(&argv[0]);
        secrets::minimal_env(&mut c).envs(env);
        c.args(&argv[1..]).current_dir(copy);
        c
    })
}

/// The variables `target.build_env` names, with their values in ratchet's
/// environment; one that is unset stays unset.
fn passed_env(names: &[String]) -> Vec<(String, String)> {
    names
        .iter()
        .filter_map(|n| Some((n.clone(), std::env::var(n).ok()?)))
        .collect()
}

/// Builds the target's source in `src` with `files` (paths relative to
/// `src`) written over it: an edit measured without touching any worktree.
pub fn build_overlaid(
    src: &Path,
    files: &std::collections::BTreeMap<String, String>,
    target: &TargetConfig,
    cache: &Path,
    timeout: Duration,
) -> Result<Built> {
    let tmp = tempfile::tempdir()?;
    let copy = tmp.path().join("src");
    copy_sources(src, &target.globs(), &copy)?;
    for (rel, text) in files {
        if Path::new(rel)
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            bail!("{rel}: not a path inside the server's directory");
        }
        let dest = copy.join(rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&dest, text).with_context(|| format!("writing {rel}"))?;
    }
    build_target(&copy, target, cache, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::servers::build::BuildFailure;
    use std::time::Instant;

    fn shell_target(script: &str, binary: &str) -> TargetConfig {
        TargetConfig {
            build: vec!["sh".into(), "-c".into(), script.into()],
            binary: binary.into(),
            sources: vec!["src/**/*.c".into()],
            io_uring: false,
            ..TargetConfig::default()
        }
    }

    fn nested_source() -> tempfile::TempDir {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("src/net")).unwrap();
        std::fs::write(src.path().join("src/net/x.c"), "deep").unwrap();
        src
    }

    /// The target's own command builds from a copy holding its sources at
    /// their own paths; the binary may sit in a directory of the output.
    #[test]
    fn a_target_builds_with_its_own_command() {
        let (src, cache) = (nested_source(), tempfile::tempdir().unwrap());
        let t = shell_target(
            "mkdir -p {out}/bin && cat src/net/x.c > {out}/bin/kv",
            "bin/kv",
        );
        let built = build_target(src.path(), &t, cache.path(), Duration::from_secs(10)).unwrap();
        assert_eq!(std::fs::read_to_string(&built.binary).unwrap(), "deep");
        // Another command over the same source is another build.
        let other = shell_target("mkdir -p {out}/bin && echo other > {out}/bin/kv", "bin/kv");
        let again =
            build_target(src.path(), &other, cache.path(), Duration::from_secs(10)).unwrap();
        assert_eq!(std::fs::read_to_string(&again.binary).unwrap(), "other\n");
        assert_eq!(built.source_hash, again.source_hash);
    }

    #[test]
    fn a_binary_the_build_did_not_leave_is_named() {
        let (src, cache) = (nested_source(), tempfile::tempdir().unwrap());
        let t = shell_target("echo x > {out}/server", "kv");
        let err = build_target(src.path(), &t, cache.path(), Duration::from_secs(10)).unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("target.binary")
                && text.contains("\"kv\"")
                && text.contains("left: server"),
            "{text}"
        );
    }

    #[test]
    fn a_hanging_build_is_killed_at_its_timeout() {
        let (src, cache) = (nested_source(), tempfile::tempdir().unwrap());
        let t = shell_target("sleep 30", "server");
        let started = Instant::now();
        let err =
            build_target(src.path(), &t, cache.path(), Duration::from_millis(300)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        let failure = err.downcast_ref::<BuildFailure>().expect("a build failure");
        assert!(failure.timed_out, "{failure}");
    }

    #[test]
    fn a_missing_build_program_is_named() {
        let (src, cache) = (nested_source(), tempfile::tempdir().unwrap());
        let t = TargetConfig {
            build: vec!["no-such-compiler-xyz".into()],
            ..shell_target("", "server")
        };
        let err = build_target(src.path(), &t, cache.path(), Duration::from_secs(1)).unwrap_err();
        assert!(
            err.to_string().contains("target.build")
                && err.to_string().contains("no-such-compiler-xyz")
        );
    }

    /// The variables `target.build_env` names reach the build, and nothing
    /// else of ratchet's environment does; another value is another build.
    #[test]
    fn the_named_variables_reach_the_build_and_key_it() {
        std::env::set_var("RATCHET_TEST_TOOLCHAIN_HOME", "/opt/toolchain-a");
        std::env::set_var("RATCHET_TEST_UNNAMED", "not passed");
        let (src, cache) = (nested_source(), tempfile::tempdir().unwrap());
        let t = TargetConfig {
            build_env: vec!["RATCHET_TEST_TOOLCHAIN_HOME".into(), "RATCHET_TEST_UNSET".into()],
            ..shell_target(
                "echo \"$RATCHET_TEST_TOOLCHAIN_HOME|${RATCHET_TEST_UNNAMED-unset}|${RATCHET_TEST_UNSET-unset}\" > {out}/server",
                "server",
            )
        };
        let built = build_target(src.path(), &t, cache.path(), Duration::from_secs(10)).unwrap();
        assert_eq!(
            std::fs::read_to_string(&built.binary).unwrap(),
            "/opt/toolchain-a|unset|unset\n"
        );
        std::env::set_var("RATCHET_TEST_TOOLCHAIN_HOME", "/opt/toolchain-b");
        let again = build_target(src.path(), &t, cache.path(), Duration::from_secs(10)).unwrap();
        assert_eq!(
            std::fs::read_to_string(&again.binary).unwrap(),
            "/opt/toolchain-b|unset|unset\n"
        );
    }

    /// A toolchain the build user cannot reach is named with what is in
    /// its way, before the build runs, rather than "Permission denied".
    #[test]
    fn a_build_program_the_build_user_cannot_reach_is_named() {
        if crate::bench::servers::privilege::privilege()
            .identity()
            .is_none()
        {
            return; // not root: builds run as ratchet's own user
        }
        let home = tempfile::tempdir().unwrap();
        // Mode 700, as root's home.
        std::fs::set_permissions(
            home.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let tool = home.path().join("cargo");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let (src, cache) = (nested_source(), tempfile::tempdir().unwrap());
        let t = TargetConfig {
            build: vec![tool.to_string_lossy().into()],
            ..shell_target("", "server")
        };
        let err = build_target(src.path(), &t, cache.path(), Duration::from_secs(5)).unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.starts_with("target.build: ")
                && text.contains("is not executable by")
                && text.contains(&format!("{} is mode 700", home.path().display())),
            "{text}"
        );
    }
}
