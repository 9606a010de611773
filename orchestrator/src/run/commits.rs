//! The messages of an attempt's commits: its own, under its ref whatever
//! its verdict, and the champion's when it is kept, with the evidence in
//! trailers that `ratchet log` reads back.

use crate::record::journal::AttemptRecord;
use crate::record::trailers;

pub(super) fn provenance(record: &AttemptRecord) -> trailers::Provenance {
    trailers::Provenance {
        origin: record.origin,
        stack_of: record.stack_of.clone(),
        retry_of: record.retry_of,
    }
}

/// The message of attempt `n`'s own commit (its ref), whatever its verdict.
pub(super) fn attempt_message(run_id: &str, n: usize, record: &AttemptRecord) -> String {
    format!(
        "attempt {n}: {}\n\n{}",
        record.hypothesis,
        trailers::attempt(run_id, n, &provenance(record))
    )
}

/// The kept commit's message: what was tried, by whom, and the evidence
/// in trailers that `ratchet log` reads back.
pub(super) fn kept_message(
    record: &AttemptRecord,
    agent: &str,
    evidence: &trailers::Evidence,
) -> String {
    let cmp = record.vs_champion.as_ref();
    let ratios = cmp.map_or(&[][..], |c| &c.block_ratios[..]);
    format!(
        "{}\n\nAgent: {}{}\nCategory: {}\nMeasured side by side with the champion and the control in {} samples;\n\
         per-sample cost ratios candidate/champion: [{}].\n\n{}",
        record.hypothesis,
        agent,
        record
            .playbook_id
            .as_deref()
            .map_or(String::new(), |p| format!(" (playbook entry {p})")),
        record.category,
        ratios.len(),
        ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(", "),
        evidence.render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Origin;
    use crate::referee::compare::Comparison;
    use crate::run::iterate::tests::record;

    #[test]
    fn an_attempt_commit_names_the_attempt_and_its_provenance() {
        let mut r = record(4);
        r.hypothesis = "use MSG_MORE".into();
        r.origin = Origin::Retry;
        r.retry_of = Some(2);
        let m = attempt_message("run1", 4, &r);
        assert!(m.starts_with("attempt 4: use MSG_MORE\n\n"), "{m}");
        assert!(
            m.ends_with(&trailers::attempt("run1", 4, &provenance(&r))),
            "{m}"
        );
    }

    #[test]
    fn a_kept_commit_says_what_was_tried_by_whom_and_the_evidence() {
        let mut r = record(5);
        r.hypothesis = "batch writes".into();
        r.category = "syscalls".into();
        r.playbook_id = Some("writev".into());
        let mut c = Comparison::judged(0.95, 0.93, 0.97, 0.03);
        c.block_ratios = vec![0.95, 0.9612];
        r.vs_champion = Some(c);
        let evidence = trailers::Evidence {
            run: "run1".into(),
            attempt: 5,
            meter: "task-clock (ns)".into(),
            unit: "ns".into(),
            cost_per_connection: Some(1000.0),
            ratio: Some(0.95),
            interval: Some([0.93, 0.97]),
            vs_control: None,
            provenance: provenance(&r),
        };
        let m = kept_message(&r, "offline", &evidence);
        let expected =
            "batch writes\n\nAgent: offline (playbook entry writev)\nCategory: syscalls\n\
                        Measured side by side with the champion and the control in 2 samples;\n\
                        per-sample cost ratios candidate/champion: [0.950, 0.961].\n\n";
        assert_eq!(m, format!("{expected}{}", evidence.render()));
        r.playbook_id = None;
        r.vs_champion = None;
        let m = kept_message(&r, "offline", &evidence);
        assert!(m.starts_with("batch writes\n\nAgent: offline\n"), "{m}");
        assert!(
            m.contains("in 0 samples;\nper-sample cost ratios candidate/champion: []."),
            "{m}"
        );
    }
}
