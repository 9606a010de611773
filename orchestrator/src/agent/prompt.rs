//! The prompt the LLM and CLI agents receive: goal, contract, rules, the
//! champion's source, every earlier attempt with its measured outcome and
//! where it came from, the promising pool a stack or retry can draw on, the
//! lessons digest and the champion's latest profile.

use super::{Origin, ProposalContext};

pub fn build(ctx: &ProposalContext, reply_format: &str) -> String {
    let mut p = String::new();
    p += "# Goal\n\nLower the CPU cost per connection of a C io_uring TCP server (the treatment). \
          A referee you cannot touch builds your change, pins it to one core, drives short-lived \
          connections at it, validates every response byte, and keeps the change only if the cost \
          per connection falls by at least the threshold, measured side by side with the current \
          champion and a Go control.\n\n";
    p += &format!(
        "# Contract\n\nPer connection: accept, read the request, write exactly the response, close \
         (server-initiated FIN). Request bytes: {:?}\nResponse bytes: {:?}\n\n",
        ctx.contract_request, ctx.contract_response
    );
    p += &format!(
        "# Rules\n\n- Exactly ONE hypothesis per reply: one idea, however many lines it touches.\n\
         - Edit only these paths: {}. Anything else rejects the attempt.\n\
         - The build is `-O2 -Wall -Wextra -Werror` with liburing 2.3; warnings fail it.\n\
         - Threads, processes or SQPOLL threads on other cores fail the gate (`off_core`).\n\n",
        ctx.allowed_paths.join(", ")
    );
    p += &format!("# Reply format\n\n{reply_format}\n\n");
    p += "# Champion source\n\n";
    for (path, text) in &ctx.files {
        p += &format!("## {path}\n\n```c\n{text}```\n\n");
    }
    p += "# Earlier attempts (ratio = candidate cost / champion cost; below 1 is cheaper)\n\n";
    if ctx.history.is_empty() {
        p += "None yet.\n";
    }
    for a in &ctx.history {
        let ratio = a.ratio.map_or("-".into(), |r| format!("{r:.3}"));
        let ci = a.ci95.map_or(String::new(), |[l, h]| {
            format!(" {:.1}% interval [{l:.3}, {h:.3}]", a.ci_level * 100.0)
        });
        let origin = match a.origin {
            Origin::Agent => String::new(),
            o => format!(" [{}]", o.describe(&a.stack_of, a.retry_of)),
        };
        let when = super::search::distance(&ctx.lineage, &a.champion);
        let when = match when {
            0 => "against the current champion".to_string(),
            k => format!("{k} champion(s) ago"),
        };
        p += &format!(
            "- #{} {}{origin} => {} ratio {ratio}{ci} ({when})\n",
            a.number, a.hypothesis, a.verdict
        );
        if let Some(d) = &a.detail {
            for line in d.lines().take(15) {
                p += &format!("    {line}\n");
            }
        }
    }
    p += "\n# Promising pool\n\nAttempts credibly cheaper than their champion (whole interval below 1) \
          but short of the threshold, not in the champion. Several small wins together can clear the \
          threshold: reply `STACK: <numbers>` to have ratchet merge them onto the champion and \
          measure the union, or `RETRY: <number>` to measure one again on the current champion. \
          The loop stacks them itself when the measurements say the union likely clears the line; \
          no idea is measured twice against the same champion.\n\n";
    if ctx.pool.is_empty() {
        p += "Empty.\n";
    }
    for e in &ctx.pool {
        p += &format!(
            "- #{} {} ratio {:.3}, {:.1}% interval [{:.3}, {:.3}], measured {} champion(s) ago\n",
            e.attempt,
            e.hypothesis,
            e.ratio,
            e.ci_level * 100.0,
            e.ci[0],
            e.ci[1],
            e.champions_ago
        );
    }
    if !ctx.kept_ideas.is_empty() {
        p += &format!("\nIdeas in the champion: {}\n", ctx.kept_ideas.join(", "));
    }
    p += &format!("Retries left in this run: {}\n", ctx.retries_left);
    p += "\n# Lessons\n\n";
    p += &ctx.lessons;
    if let Some(profile) = &ctx.profile {
        p += "\n\n# Champion profile (perf, cpu-clock)\n\n";
        p += profile;
    }
    p
}
