//! The report's table of the hottest functions, baseline beside champion.
//! Where the profiles are counts (emulated instructions), each function's
//! count per connection is compared too: the study found MSG_MORE by a
//! kernel write function taking twice what it should, which a share alone
//! hides when everything else shrinks around it.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::svg::escape;
use crate::bench::meters::profile::Profile;

/// Rows: the hottest of either profile.
const ROWS: usize = 20;

/// The table, or nothing when neither profile names functions.
pub fn table(base: Option<&Profile>, champion: Option<&Profile>) -> String {
    let share = |p: Option<&Profile>, key: &(String, String)| {
        p.and_then(|p| {
            p.top
                .iter()
                .find(|(_, d, f)| (d, f) == (&key.0, &key.1))
                .map(|t| t.0)
        })
    };
    let mut keys: BTreeMap<(String, String), f64> = BTreeMap::new();
    for p in [champion, base].into_iter().flatten() {
        for (s, d, f) in p.top.iter().take(ROWS) {
            let e = keys.entry((d.clone(), f.clone())).or_default();
            *e = e.max(*s);
        }
    }
    if keys.is_empty() {
        return String::new();
    }
    let mut rows: Vec<_> = keys.into_iter().collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let counts = [base, champion].map(|p| p.and_then(|p| p.per_connection));
    let unit = champion.or(base).map_or("", Profile::unit);
    let mut s = format!(
        "<table><tr><th>DSO</th><th>function</th><th>baseline share</th><th>champion share</th>{}</tr>",
        if counts.iter().all(Option::is_some) {
            format!("<th>champion / baseline, {} per connection</th>", escape(unit))
        } else {
            String::new()
        }
    );
    let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.2}%", v * 100.0));
    for (key, _) in rows.iter().take(2 * ROWS) {
        let (b, c) = (share(base, key), share(champion, key));
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
            escape(&key.0),
            escape(&key.1),
            pct(b),
            pct(c)
        );
        if let [Some(nb), Some(nc)] = counts {
            let ratio = b.zip(c).map(|(b, c)| (c * nc) / (b * nb));
            let _ = write!(
                s,
                "<td>{}</td>",
                ratio.map_or("-".into(), |r| format!("{r:.2}"))
            );
        }
        s += "</tr>";
    }
    s + "</table>"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(top: &[(f64, &str)], per_connection: Option<f64>) -> Profile {
        Profile {
            top: top
                .iter()
                .map(|(s, f)| (*s, "[kernel]".into(), f.to_string()))
                .collect(),
            per_connection,
            unit: Some("emulated instructions".into()),
            ..Default::default()
        }
    }

    /// A write function whose share holds while the whole halves costs
    /// half as much a connection: the last column says so.
    #[test]
    fn a_function_is_compared_per_connection_where_the_profiles_count() {
        let base = profile(&[(0.2, "tcp_write_xmit"), (0.1, "tcp_ack")], Some(40_000.0));
        let champ = profile(&[(0.2, "tcp_write_xmit")], Some(20_000.0));
        let t = table(Some(&base), Some(&champ));
        assert!(t.contains("emulated instructions per connection"), "{t}");
        assert!(
            t.contains("<td>tcp_write_xmit</td><td>20.00%</td><td>20.00%</td><td>0.50</td>"),
            "{t}"
        );
        assert!(
            t.contains("<td>tcp_ack</td><td>10.00%</td><td>-</td><td>-</td>"),
            "{t}"
        );
        assert_eq!(table(None, None), "");
        let perf = Profile {
            per_connection: None,
            ..champ
        };
        assert!(!table(Some(&base), Some(&perf)).contains("per connection"));
    }
}
