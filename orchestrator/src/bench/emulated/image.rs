//! The guest's root file system: an initramfs (newc cpio) holding busybox,
//! the guest's init, ratchet itself, every arm's program and the shared
//! libraries each of them loads, at the same paths as on the host, so a
//! dynamically linked server or a `cmd:` arm runs in the guest as it was
//! given. Nothing else of the host is visible to the servers.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

enum Content {
    Dir,
    File(PathBuf),
    Bytes(Vec<u8>, u32),
}

/// The files of an image, by their absolute path in the guest.
#[derive(Default)]
pub struct Image {
    entries: BTreeMap<PathBuf, Content>,
}

/// The shared objects `program` loads, the dynamic loader included, as
/// `ldd` resolves them on this host; none for a static program.
pub fn libraries(program: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(program)
        .output()
        .context("running ldd (Debian: libc-bin)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // "not a dynamic executable": a static binary or a script.
        return Ok(Vec::new());
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        match path {
            Some(p) if p.starts_with('/') => libs.push(PathBuf::from(p)),
            Some("not") => bail!("{}: {}", program.display(), line.trim()),
            _ => {}
        }
    }
    Ok(libs)
}

impl Image {
    /// Adds the host file `host` at `guest`, with its parents.
    pub fn file(&mut self, guest: &Path, host: &Path) -> Result<()> {
        if !host.is_file() {
            bail!("{} is not a file", host.display());
        }
        self.parents(guest);
        self.entries
            .insert(guest.to_path_buf(), Content::File(host.to_path_buf()));
        Ok(())
    }

    pub fn bytes(&mut self, guest: &Path, bytes: Vec<u8>, mode: u32) {
        self.parents(guest);
        self.entries
            .insert(guest.to_path_buf(), Content::Bytes(bytes, mode));
    }

    pub fn dir(&mut self, guest: &Path) {
        self.parents(guest);
        self.entries.insert(guest.to_path_buf(), Content::Dir);
    }

    /// Adds `program` at its own path with every library it loads.
    pub fn program(&mut self, program: &Path) -> Result<()> {
        let program = absolute(program)?;
        self.file(&program, &program)?;
        for lib in libraries(&program)? {
            self.file(&lib, &lib)
                .with_context(|| format!("a library of {}", program.display()))?;
        }
        Ok(())
    }

    fn parents(&mut self, path: &Path) {
        let mut dir = PathBuf::from("/");
        let parents: Vec<Component> = path.parent().map_or(vec![], |p| p.components().collect());
        for c in parents {
            if let Component::Normal(name) = c {
                dir.push(name);
                self.entries.entry(dir.clone()).or_insert(Content::Dir);
            }
        }
    }

    /// Writes the image as a newc cpio archive. Paths sort parents first,
    /// as the kernel's unpacker needs.
    pub fn write_to(&self, mut w: impl Write) -> Result<()> {
        for (ino, (path, content)) in self.entries.iter().enumerate() {
            let name = path.to_string_lossy();
            let name = name.trim_start_matches('/');
            let entry = cpio::newc::Builder::new(name).ino(ino as u32 + 1).nlink(1);
            match content {
                Content::Dir => {
                    entry.mode(0o040755).write(&mut w, 0).finish()?;
                }
                Content::File(host) => {
                    let data = std::fs::read(host)
                        .with_context(|| format!("reading {}", host.display()))?;
                    let mode = std::fs::metadata(host)?.permissions().mode() & 0o777;
                    let mut f = entry.mode(0o100000 | mode).write(&mut w, data.len() as u32);
                    f.write_all(&data)?;
                    f.finish()?;
                }
                Content::Bytes(data, mode) => {
                    let mut f = entry.mode(0o100000 | mode).write(&mut w, data.len() as u32);
                    f.write_all(data)?;
                    f.finish()?;
                }
            }
        }
        cpio::newc::trailer(&mut w)?;
        Ok(())
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    p.canonicalize()
        .with_context(|| format!("{} does not exist", p.display()))
}

/// The programs a `sh -c` command line names: every word that is an
/// existing file, as given or on PATH, so that `cmd:` arms find in the
/// guest what they run. A word naming nothing on the host is left alone.
pub fn programs_in(line: &str) -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    line.split_whitespace()
        .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
        .filter_map(|w| {
            let p = Path::new(w);
            if w.contains('/') {
                return p.is_file().then(|| p.to_path_buf());
            }
            std::env::split_paths(&path).map(|d| d.join(w)).find(|c| {
                c.is_file()
                    && c.metadata()
                        .is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_brings_its_loader_and_libc() {
        let libs = libraries(Path::new("/bin/ls")).unwrap();
        assert!(
            libs.iter()
                .any(|l| l.to_string_lossy().contains("ld-linux")),
            "{libs:?}"
        );
        assert!(
            libs.iter().any(|l| l.to_string_lossy().contains("libc.so")),
            "{libs:?}"
        );
    }

    #[test]
    fn an_image_lists_parents_before_children() {
        let mut img = Image::default();
        img.bytes(Path::new("/a/b/c"), b"x".to_vec(), 0o644);
        img.dir(Path::new("/tmp"));
        let mut out = Vec::new();
        img.write_to(&mut out).unwrap();
        let mut names = Vec::new();
        let mut r = out.as_slice();
        loop {
            let e = cpio::newc::Reader::new(r).unwrap();
            if e.entry().is_trailer() {
                break;
            }
            names.push(e.entry().name().to_string());
            r = e.finish().unwrap();
        }
        assert_eq!(names, ["a", "a/b", "a/b/c", "tmp"]);
    }

    #[test]
    fn a_command_line_names_its_programs() {
        let found = programs_in("ls -l /bin/cat nosuchword");
        assert!(found.iter().any(|p| p.ends_with("ls")), "{found:?}");
        assert!(found.contains(&PathBuf::from("/bin/cat")), "{found:?}");
        assert_eq!(found.len(), 2, "{found:?}");
    }
}
