//! A headless Chromium to check a report with: a browser is what a reader
//! opens the report in, so a chart is checked as drawn, not as written.

use std::path::Path;
use std::process::{Command, Output};

/// Pixels of `rgb` (within 2 per channel) in a decoded RGBA or RGB image.
pub fn pixels_of(data: &[u8], channels: usize, rgb: [u8; 3]) -> usize {
    data.chunks(channels)
        .filter(|p| (0..3).all(|i| p[i].abs_diff(rgb[i]) <= 2))
        .count()
}

/// The first Chromium on the PATH; scripts/setup.sh --with-chromium installs
/// one, and a test that cannot check its report fails rather than skips.
pub fn chromium() -> String {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return name.into();
        }
    }
    panic!("no headless Chromium to check the report with: run scripts/setup.sh --with-chromium (Debian package chromium)");
}

/// Chromium run headless on `page` with `args`, killed after two minutes so
/// a browser that hangs fails the test instead of stalling the suite.
pub fn headless(args: &[&str], page: &Path) -> Output {
    Command::new("timeout")
        .arg("120")
        .arg(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            std::env::temp_dir()
                .join(format!("ratchet-chromium-{}", std::process::id()))
                .display()
        ))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap()
}
