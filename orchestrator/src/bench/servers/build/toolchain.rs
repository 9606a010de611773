//! Whether the build user can run the build's program. Builds run
//! unprivileged, so a toolchain installed the way most users install one
//! (rustup, nvm, pyenv, SDKMAN, Go under `$HOME`) can sit in a home
//! directory the build user cannot enter. The build then fails at once with
//! "Permission denied (os error 13)", which does not say whose permission,
//! for what, or how to fix it: this says all three before the build runs.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The user a build runs as.
pub struct BuildUser<'a> {
    pub name: &'a str,
    pub uid: u32,
    pub gid: u32,
}

/// `program` as given when it has a slash, else the first file of that name
/// in a directory of `PATH`, as `execvp` finds it.
pub fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Whether `user` holds `bit` (4 read, 2 write, 1 execute or search) on a
/// file, by the kernel's rule: the owner's bits for the owner, the group's
/// for the group, the others' for everyone else, never a union.
fn holds(meta: &std::fs::Metadata, user: &BuildUser, bit: u32) -> bool {
    let mode = meta.mode();
    let shift = if meta.uid() == user.uid {
        6
    } else if meta.gid() == user.gid {
        3
    } else {
        0
    };
    (mode >> shift) & bit != 0
}

/// The first directory on the way to `path` (not `path` itself) that `user`
/// may not search.
pub fn first_closed_dir(path: &Path, user: &BuildUser) -> Option<PathBuf> {
    closed_on_the_way(path, user, &[]).map(|(dir, _)| dir)
}

/// Whether `user` may list and enter the directory `dir`.
pub fn may_read(dir: &Path, user: &BuildUser) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| holds(&m, user, 4) && holds(&m, user, 1))
}

/// The first directory on the way to `path` that `user` may not search,
/// with its mode, passing over those the build's view covers: a strict
/// ancestor of an `exposed` directory that holds `path`.
fn closed_on_the_way(path: &Path, user: &BuildUser, exposed: &[PathBuf]) -> Option<(PathBuf, u32)> {
    let mut dirs: Vec<&Path> = path.ancestors().skip(1).collect();
    dirs.reverse();
    let covered = |dir: &Path| {
        exposed
            .iter()
            .any(|e| path.starts_with(e) && e.starts_with(dir) && e != dir)
    };
    for dir in dirs.into_iter().filter(|d| !d.as_os_str().is_empty()) {
        if covered(dir) {
            continue;
        }
        let meta = std::fs::metadata(dir).ok()?;
        if !holds(&meta, user, 1) {
            return Some((dir.to_path_buf(), meta.mode() & 0o7777));
        }
    }
    None
}

/// The first directory on the way to `path` that `user` may not search, or
/// `path` itself if it may not execute it.
fn first_barrier(path: &Path, user: &BuildUser, exposed: &[PathBuf]) -> Option<(PathBuf, u32)> {
    if let Some(closed) = closed_on_the_way(path, user, exposed) {
        return Some(closed);
    }
    let meta = std::fs::metadata(path).ok()?;
    (!holds(&meta, user, 1)).then(|| (path.to_path_buf(), meta.mode() & 0o7777))
}

/// Why `user` cannot run `program`, naming the program, the user and the
/// directory or file in the way; None where nothing is (or where the
/// program is not found: that has its own message).
pub fn unreachable(program: &str, user: &BuildUser, exposed: &[PathBuf]) -> Option<String> {
    let path = which(program)?;
    // The path as found, then where its links lead: both must be passable.
    let real = path.canonicalize().ok()?;
    let (barrier, mode) =
        first_barrier(&path, user, exposed).or_else(|| first_barrier(&real, user, exposed))?;
    let what = if barrier == path || barrier == real {
        "it".to_string()
    } else {
        barrier.display().to_string()
    };
    Some(format!(
        "{program} at {} is not executable by {} (uid {}): {what} is mode {mode:o}. \
         Builds run as {}: name the toolchain's directories in target.toolchain (rustup's: \
         [\"~/.cargo\", \"~/.rustup\"]) and the build sees them read-only, alone in {}, \
         or install the toolchain where that user can reach it (/usr/local, /opt); a \
         toolchain's own variables reach the build through target.build_env",
        path.display(),
        user.name,
        user.uid,
        user.name,
        barrier.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const NOBODY: BuildUser = BuildUser {
        name: "nobody",
        uid: 65_534,
        gid: 65_534,
    };

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A toolchain in a home directory of mode 700, as rustup leaves root's.
    #[test]
    fn a_closed_home_is_named_with_its_mode() {
        let home = tempfile::tempdir().unwrap();
        chmod(home.path(), 0o755);
        let bin = home.path().join(".cargo/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let cargo = bin.join("cargo");
        std::fs::write(&cargo, "#!/bin/sh\n").unwrap();
        chmod(&cargo, 0o755);
        let program = cargo.to_str().unwrap();
        assert_eq!(unreachable(program, &NOBODY, &[]), None);

        let dot_cargo = home.path().join(".cargo");
        chmod(&dot_cargo, 0o700);
        let why = unreachable(program, &NOBODY, &[]).unwrap();
        assert!(
            why.starts_with(&format!(
                "{program} at {program} is not executable by nobody (uid 65534): {} is mode 700",
                dot_cargo.display()
            )),
            "{why}"
        );
        chmod(&dot_cargo, 0o711);
        assert_eq!(unreachable(program, &NOBODY, &[]), None);

        // A closed home passed over where the build's view exposes the
        // toolchain inside it; a closed directory inside the toolchain not.
        chmod(home.path(), 0o700);
        assert!(unreachable(program, &NOBODY, &[]).is_some());
        assert_eq!(
            unreachable(program, &NOBODY, std::slice::from_ref(&dot_cargo)),
            None
        );
        chmod(&bin, 0o700);
        let why = unreachable(program, &NOBODY, std::slice::from_ref(&dot_cargo)).unwrap();
        assert!(
            why.contains(&format!("{} is mode 700", bin.display())),
            "{why}"
        );
        chmod(&bin, 0o755);
        chmod(home.path(), 0o755);

        chmod(&cargo, 0o744);
        let why = unreachable(program, &NOBODY, &[]).unwrap();
        assert!(why.contains(": it is mode 744"), "{why}");
    }

    /// The owner's bits decide for the owner, even where the others' would
    /// let anyone else through.
    #[test]
    fn the_owner_is_judged_by_the_owners_bits_alone() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "").unwrap();
        chmod(&tool, 0o075);
        let meta = std::fs::metadata(&tool).unwrap();
        let owner = BuildUser {
            name: "owner",
            uid: meta.uid(),
            gid: meta.gid(),
        };
        assert!(!holds(&meta, &owner, 1));
        assert!(holds(&meta, &NOBODY, 1));
    }

    #[test]
    fn a_program_on_path_is_found_as_execvp_would() {
        assert!(which("sh").is_some_and(|p| p.is_absolute()));
        assert_eq!(which("./x"), Some(PathBuf::from("./x")));
        assert_eq!(unreachable("no-such-program-anywhere", &NOBODY, &[]), None);
    }
}
