//! The prompt the LLM and CLI agents receive: goal, contract, rules, the
//! champion's source, every earlier attempt with its measured outcome, the
//! lessons digest and the champion's latest profile.

use super::ProposalContext;

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
        let ci = a
            .ci95
            .map_or(String::new(), |[l, h]| format!(" CI95 [{l:.3}, {h:.3}]"));
        p += &format!(
            "- #{} {} => {} ratio {ratio}{ci}\n",
            a.number, a.hypothesis, a.verdict
        );
        if let Some(d) = &a.detail {
            for line in d.lines().take(15) {
                p += &format!("    {line}\n");
            }
        }
    }
    p += "\n# Lessons\n\n";
    p += &ctx.lessons;
    if let Some(profile) = &ctx.profile {
        p += "\n\n# Champion profile (perf, cpu-clock)\n\n";
        p += profile;
    }
    p
}
