//! Secrets (API keys) stay with ratchet. Servers, builds and the profile
//! step start from a minimal environment; ratchet is not dumpable, and the
//! copy of a secret in its initial environment block (what
//! `/proc/<pid>/environ` shows, even to root) is overwritten at start-up; and
//! any text an untrusted program wrote that ratchet shows or records (a
//! server's stderr, a build or agent log) has every secret's value redacted.

use std::process::Command;
use std::sync::Mutex;

/// Names whose values are secrets beyond the configured ones.
pub fn looks_secret(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"]
        .iter()
        .any(|w| n.contains(w))
}

/// Names registered from the configuration (`api_key_env`, `pass_env`).
static CONFIGURED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Shortest value treated as a secret: shorter ones would redact ordinary
/// words.
const MIN_SECRET: usize = 6;

pub fn register(names: impl IntoIterator<Item = String>) {
    let mut c = CONFIGURED.lock().unwrap_or_else(|e| e.into_inner());
    for n in names {
        if !c.contains(&n) {
            c.push(n);
        }
    }
}

/// Every secret's (name, value) in ratchet's environment now.
fn secrets() -> Vec<(String, String)> {
    let configured = CONFIGURED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, v)| (looks_secret(k) || configured.contains(k)) && v.len() >= MIN_SECRET)
        .collect()
}

/// `text` with every secret's value replaced by its name.
pub fn redact(text: &str) -> String {
    let mut out = text.to_string();
    for (name, value) in secrets() {
        if out.contains(&value) {
            out = out.replace(&value, &format!("[redacted ${name}]"));
        }
    }
    out
}

/// Search path and locale only: nothing ratchet was started with reaches
/// the program, keys least of all.
pub fn minimal_env(cmd: &mut Command) -> &mut Command {
    cmd.env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH")
                .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into()),
        )
        .env("LC_ALL", "C")
}

/// Makes ratchet non-dumpable (so a same-user program cannot read its memory
/// or `/proc/<pid>/environ`) and overwrites the secrets in its initial
/// environment block, which root could still read; the values live on in
/// ratchet's own heap copy of the environment. Call first thing in `main`,
/// while ratchet has one thread.
pub fn protect_self() {
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    for (name, value) in secrets() {
        let Ok(cname) = std::ffi::CString::new(name.clone()) else {
            continue;
        };
        // SAFETY: one thread; getenv points into the initial block, whose
        // value bytes are overwritten in place (same length).
        unsafe {
            let p = libc::getenv(cname.as_ptr());
            if !p.is_null() {
                std::ptr::write_bytes(p, b'*', libc::strlen(p));
            }
        }
        std::env::set_var(&name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_replaces_every_secret_value() {
        std::env::set_var("RATCHET_TEST_API_KEY", "sk-very-secret-123");
        register(["RATCHET_TEST_CONFIGURED".to_string()]);
        std::env::set_var("RATCHET_TEST_CONFIGURED", "plain-but-configured");
        let text = "env: RATCHET_TEST_API_KEY=sk-very-secret-123 other=plain-but-configured";
        let r = redact(text);
        assert!(!r.contains("sk-very-secret-123"), "{r}");
        assert!(!r.contains("plain-but-configured"), "{r}");
        assert!(r.contains("[redacted $RATCHET_TEST_API_KEY]"), "{r}");
    }

    #[test]
    fn the_minimal_environment_holds_no_secret() {
        std::env::set_var("RATCHET_TEST_TOKEN", "tok-abcdef-987");
        let mut c = Command::new("env");
        let out = minimal_env(&mut c).output().unwrap();
        let env = String::from_utf8_lossy(&out.stdout);
        assert!(!env.contains("tok-abcdef-987"), "{env}");
        assert!(env.contains("PATH="), "{env}");
    }
}
