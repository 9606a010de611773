//! The build's own view of the filesystem, for a toolchain kept where the
//! build user cannot go (`target.toolchain`): rustup's `~/.cargo` and
//! `~/.rustup` under root's home, mode 700. The build runs in a mount
//! namespace of its own in which the first directory on the way that the
//! build user may not enter is covered by an empty tmpfs, and each
//! toolchain directory is mounted into it, read-only, at its own path. So
//! the toolchain is found where its own settings say it is, the build can
//! change none of it, and nothing else of that home is there to read:
//! narrower than `chmod o+x /root`, which opens every file of root's home
//! whose name can be guessed to the untrusted code a build runs.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::toolchain::{first_closed_dir, may_read, BuildUser};

/// What the build's child does before it drops its privileges: every path
/// prepared here, so the child only makes system calls.
pub struct BuildView {
    /// Where each toolchain directory is bound while its home is covered.
    _stage: tempfile::TempDir,
    /// (toolchain directory, its stage), in the order given.
    binds: Vec<(CString, CString)>,
    /// The closed directories covered by an empty tmpfs.
    covers: Vec<CString>,
    /// The directories made inside the covers, parents first.
    dirs: Vec<CString>,
    covered: Vec<PathBuf>,
}

fn c_path(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).with_context(|| format!("{} holds a NUL", p.display()))
}

impl BuildView {
    /// The view exposing `toolchain` to `user`; None when the user can
    /// already reach every directory of it.
    pub fn plan(toolchain: &[PathBuf], user: &BuildUser) -> Result<Option<Self>> {
        let mut hidden = vec![];
        let mut covered: Vec<PathBuf> = vec![];
        for dir in toolchain {
            if !may_read(dir, user) {
                bail!(
                    "target.toolchain: {} is not readable by {} (uid {}): a toolchain's own \
                     directories must be (chmod -R o+rX)",
                    dir.display(),
                    user.name,
                    user.uid
                );
            }
            let Some(closed) = first_closed_dir(dir, user) else {
                continue;
            };
            hidden.push(dir);
            if !covered.iter().any(|c| closed.starts_with(c)) {
                covered.retain(|c| !c.starts_with(&closed));
                covered.push(closed);
            }
        }
        if hidden.is_empty() {
            return Ok(None);
        }
        let stage = tempfile::Builder::new().prefix("ratchet-view-").tempdir()?;
        let mut binds = vec![];
        for (i, dir) in hidden.iter().enumerate() {
            let staged = stage.path().join(i.to_string());
            std::fs::create_dir(&staged)?;
            binds.push((c_path(dir)?, c_path(&staged)?));
        }
        let mut dirs: Vec<&Path> = hidden
            .iter()
            .flat_map(|d| d.ancestors())
            .filter(|a| covered.iter().any(|c| a.starts_with(c) && a != c))
            .collect();
        dirs.sort_by_key(|d| (d.components().count(), *d));
        dirs.dedup();
        Ok(Some(BuildView {
            binds,
            covers: covered.iter().map(|c| c_path(c)).collect::<Result<_>>()?,
            dirs: dirs.into_iter().map(c_path).collect::<Result<_>>()?,
            covered,
            _stage: stage,
        }))
    }

    /// What the build sees, for `doctor`.
    pub fn describe(&self) -> String {
        let shown: Vec<String> = self
            .binds
            .iter()
            .map(|(dir, _)| dir.to_string_lossy().into_owned())
            .collect();
        let covered: Vec<String> = self
            .covered
            .iter()
            .map(|c| c.display().to_string())
            .collect();
        format!(
            "the toolchain in {} read-only, alone in {}",
            shown.join(", "),
            covered.join(", ")
        )
    }

    /// Refuses a directory the build works in that the view would hide.
    pub fn keeps(&self, what: &str, path: &Path) -> Result<()> {
        if let Some(c) = self.covered.iter().find(|c| path.starts_with(c)) {
            bail!(
                "target.toolchain: the build's {what} {} is inside {}, which the build's view \
                 covers so that only the toolchain shows: set RATCHET_BUILD_CACHE outside it",
                path.display(),
                c.display()
            );
        }
        Ok(())
    }

    /// In the build's child, still privileged: a mount namespace of its own,
    /// the closed directories covered, the toolchain bound back read-only.
    /// Only system calls, as a child between fork and exec must.
    pub fn enter(&self) -> std::io::Result<()> {
        use libc::{CLONE_NEWNS, MS_REMOUNT};
        use libc::{MNT_DETACH, MS_BIND, MS_NODEV, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC};
        let none = std::ptr::null();
        let check = |rc: libc::c_int| {
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        unsafe {
            check(libc::unshare(CLONE_NEWNS))?;
            check(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                MS_REC | MS_PRIVATE,
                none.cast(),
            ))?;
            for (dir, stage) in &self.binds {
                check(libc::mount(
                    dir.as_ptr(),
                    stage.as_ptr(),
                    none,
                    MS_BIND | MS_REC,
                    none.cast(),
                ))?;
            }
            for cover in &self.covers {
                let flags = MS_NOSUID | MS_NODEV;
                let data = c"mode=755";
                check(libc::mount(
                    c"tmpfs".as_ptr(),
                    cover.as_ptr(),
                    c"tmpfs".as_ptr(),
                    flags,
                    data.as_ptr().cast(),
                ))?;
            }
            for dir in &self.dirs {
                if libc::mkdir(dir.as_ptr(), 0o755) != 0
                    && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (dir, stage) in &self.binds {
                check(libc::mount(
                    stage.as_ptr(),
                    dir.as_ptr(),
                    none,
                    MS_BIND | MS_REC,
                    none.cast(),
                ))?;
                let ro = MS_REMOUNT | MS_BIND | MS_RDONLY;
                check(libc::mount(none, dir.as_ptr(), none, ro, none.cast()))?;
                check(libc::umount2(stage.as_ptr(), MNT_DETACH))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::servers::privilege;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;
    use std::time::Duration;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A home of mode 700 holding a toolchain and a secret, as rustup
    /// leaves root's.
    fn closed_home() -> (tempfile::TempDir, PathBuf) {
        let home = tempfile::tempdir().unwrap();
        let bin = home.path().join(".tc/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("tool"), "#!/bin/sh\necho from the toolchain\n").unwrap();
        chmod(&bin.join("tool"), 0o755);
        std::fs::write(home.path().join("secret"), "key\n").unwrap();
        chmod(&home.path().join("secret"), 0o644);
        chmod(home.path(), 0o700);
        let tc = home.path().join(".tc");
        (home, tc)
    }

    fn run(script: String, view: Option<BuildView>) -> String {
        let mut c = Command::new("sh");
        c.args(["-c", &script]);
        let (_, out) =
            super::super::bounded::run_bounded_in(c, Duration::from_secs(10), view.map(Into::into))
                .unwrap();
        out
    }

    /// The build user runs a toolchain from a closed home, sees nothing
    /// else of it, and cannot change it; without the view it cannot run it.
    #[test]
    fn a_toolchain_in_a_closed_home_is_seen_alone_and_read_only() {
        let Some(id) = privilege::privilege().identity() else {
            eprintln!("not root: builds run as this user, who reaches its own toolchain");
            return;
        };
        let user = super::super::build_user(id);
        let (home, tc) = closed_home();
        let h = home.path().display();
        let script = format!(
            "{h}/.tc/bin/tool; ls -A {h}; cat {h}/secret; touch {h}/.tc/planted && echo wrote"
        );
        let without = run(script.clone(), None);
        assert!(without.contains("Permission denied"), "{without}");
        assert!(!without.contains("from the toolchain"), "{without}");

        let view = BuildView::plan(std::slice::from_ref(&tc), &user)
            .unwrap()
            .expect("the home is closed to the build user");
        let with = run(script, Some(view));
        assert!(with.contains("from the toolchain"), "{with}");
        let listing: Vec<&str> = with
            .lines()
            .filter(|l| l.starts_with('.') || *l == "secret")
            .collect();
        assert_eq!(listing, [".tc"], "{with}");
        assert!(
            with.contains("No such file"),
            "the secret is not there: {with}"
        );
        assert!(with.contains("Read-only file system"), "{with}");
        assert!(!with.contains("wrote"), "{with}");
        assert!(!tc.join("planted").exists());
    }

    #[test]
    fn nothing_is_covered_where_the_build_user_reaches_the_toolchain() {
        let Some(id) = privilege::privilege().identity() else {
            return;
        };
        let (home, tc) = closed_home();
        chmod(home.path(), 0o711);
        let user = super::super::build_user(id);
        assert!(BuildView::plan(&[tc], &user).unwrap().is_none());
    }

    #[test]
    fn an_unreadable_toolchain_and_a_hidden_build_directory_are_named() {
        let Some(id) = privilege::privilege().identity() else {
            return;
        };
        let user = super::super::build_user(id);
        let (home, tc) = closed_home();
        chmod(&tc, 0o700);
        let err = BuildView::plan(std::slice::from_ref(&tc), &user)
            .err()
            .unwrap();
        assert!(err.to_string().contains("is not readable by"), "{err}");
        chmod(&tc, 0o755);
        let view = BuildView::plan(&[tc], &user).unwrap().unwrap();
        let err = view
            .keeps("directory", &home.path().join("build"))
            .unwrap_err();
        assert!(err.to_string().contains("RATCHET_BUILD_CACHE"), "{err}");
        assert!(view.keeps("directory", Path::new("/var/cache")).is_ok());
    }
}
