//! The prompt the LLM and CLI agents receive: goal, contract, rules, the
//! champion's source, every earlier attempt with its measured outcome and
//! where it came from, the promising pool a stack or retry can draw on, the
//! lessons digest and the champion's latest profile.
//!
//! Under a context budget (see [`super::budget`]) the goal, contract, rules,
//! reply format and the champion's source are always sent whole. The rest
//! is cut in this order of priority, most valuable first: the promising
//! pool, the most recent attempts, the profile's hottest lines, the lessons
//! from the start of the digest.
//!
//! What changes least comes first, so that a server's prompt cache keeps
//! the longest prefix from one attempt to the next, and the reply format
//! comes last, where a small model still heeds it.

use super::budget::{self, Budget, Keep, Optional, Overflow};
use super::{Origin, ProposalContext};
use crate::bench::load::contract::Closer;
use crate::bench::load::contract::ContractConfig;

/// Display order of the optional parts.
const LESSONS: usize = 0;
const PROFILE: usize = 1;
const POOL: usize = 2;
const HISTORY: usize = 3;
/// The order they are filled in.
const PRIORITY: [usize; 4] = [POOL, HISTORY, PROFILE, LESSONS];

/// The whole prompt, or under `budget` the prompt cut to fit it.
pub fn build(
    ctx: &ProposalContext,
    reply_format: &str,
    budget: Option<&Budget>,
) -> Result<String, Overflow> {
    let head = required(ctx);
    let tail = format!("\n# Reply format\n\n{reply_format}\n");
    debug_assert_eq!(head.clone() + &tail, required_only(ctx, reply_format));
    let parts = [lessons(ctx), profile(ctx), pool(ctx), history(ctx)];
    let kept = match budget {
        Some(b) => budget::fit(&(head.clone() + &tail), &parts, &PRIORITY, b)?,
        None => parts.iter().map(|p| p.items.len()).collect(),
    };
    let body = parts
        .iter()
        .zip(kept)
        .fold(head, |s, (part, k)| s + &part.render(k));
    Ok(body + &tail)
}

/// What every prompt holds whole, for counting it.
pub fn required_only(ctx: &ProposalContext, reply_format: &str) -> String {
    format!("{}\n# Reply format\n\n{reply_format}\n", required(ctx))
}

fn required(ctx: &ProposalContext) -> String {
    let mut p = String::new();
    let t = &ctx.target;
    p += &format!(
        "# Goal\n\nLower the CPU cost per connection of a {} server (the treatment). {}\n\n\
         A referee you cannot touch builds your change, pins it to one core, drives short-lived \
         connections at it, validates every response byte, and keeps the change only if the cost \
         per connection falls by at least the threshold, measured side by side with the current \
         champion.\n\n",
        t.language,
        t.description.trim()
    );
    p += &contract(&ctx.contract);
    p += &format!(
        "# Rules\n\n- Exactly ONE hypothesis per reply: one idea, however many lines it touches.\n\
         - Edit only these paths: {}. Anything else rejects the attempt.\n\
         - The build is {}; a build that fails rejects the attempt.\n\
         - Threads, processes or SQPOLL threads on other cores fail the gate (`off_core`).\n\n",
        ctx.allowed_paths.join(", "),
        ctx.build
    );
    p += "# Champion source\n\n";
    for (path, text) in &ctx.files {
        p += &format!("## {path}\n\n```{}\n{text}```\n\n", t.fence());
    }
    p
}

/// The contract in the words a server's author needs: what one
/// connection carries and who closes it.
fn contract(c: &ContractConfig) -> String {
    let per = match (c.requests_per_connection, c.closes) {
        (1, Closer::Server) => "accept, read the request, write exactly the response, close \
                               (server-initiated FIN)"
            .to_string(),
        (n, Closer::Server) => format!(
            "accept, then {n} times: read a request, write exactly the response; then close \
             (server-initiated FIN)"
        ),
        (n, Closer::Client) => format!(
            "accept, then {n} times: read a request, write exactly the response (keep-alive; \
             requests may arrive pipelined); the client then shuts down its side and the server \
             closes, sending nothing more"
        ),
    };
    let mut s = format!(
        "# Contract\n\nPer connection: {per}. Request bytes: {:?}\nResponse bytes: {:?}\n",
        c.request, c.response
    );
    for (name, shape) in &c.fields {
        s += &format!(
            "- {{{name}}} in the response varies: any {}\n",
            shape.describe()
        );
    }
    s + "\n"
}

fn history(ctx: &ProposalContext) -> Optional {
    let items = ctx
        .history
        .iter()
        .map(|a| {
            let ratio = a.ratio.map_or("-".into(), |r| format!("{r:.3}"));
            let ci = a.interval.map_or(String::new(), |[l, h]| {
                format!(" {:.1}% interval [{l:.3}, {h:.3}]", a.ci_level * 100.0)
            });
            let origin = match a.origin {
                Origin::Agent => String::new(),
                o => format!(" [{}]", o.describe(&a.stack_of, a.retry_of)),
            };
            let when = match super::search::distance(&ctx.lineage, &a.champion) {
                0 => "against the current champion".to_string(),
                k => format!("{k} champion(s) ago"),
            };
            let mut item = format!(
                "- #{} {}{origin} => {} ratio {ratio}{ci} ({when})\n",
                a.number, a.hypothesis, a.verdict
            );
            for line in a.detail.iter().flat_map(|d| d.lines().take(15)) {
                item += &format!("    {line}\n");
            }
            item
        })
        .collect();
    let mut heading =
        "\n# Earlier attempts (ratio = candidate cost / champion cost; below 1 is cheaper)\n\n"
            .to_string();
    if ctx.history.is_empty() {
        heading += "None yet.\n";
    }
    Optional {
        heading,
        items,
        keep: Keep::Last,
        what: "earlier attempts",
        footer: String::new(),
    }
}

fn pool(ctx: &ProposalContext) -> Optional {
    let mut heading = "\n# Promising pool\n\nAttempts credibly cheaper than their champion (whole interval below 1) \
          but short of the threshold, not in the champion. Several small wins together can clear the \
          threshold: reply `STACK: <numbers>` to have ratchet merge them onto the champion and \
          measure the union, or `RETRY: <number>` to measure one again on the current champion. \
          The loop stacks them itself when the measurements say the union likely clears the line; \
          no idea is measured twice against the same champion.\n\n"
        .to_string();
    if ctx.pool.is_empty() {
        heading += "Empty.\n";
    }
    let items = ctx
        .pool
        .iter()
        .map(|e| {
            format!(
                "- #{} {} ratio {:.3}, {:.1}% interval [{:.3}, {:.3}], measured {} champion(s) ago\n",
                e.attempt,
                e.hypothesis,
                e.ratio,
                e.ci_level * 100.0,
                e.ci[0],
                e.ci[1],
                e.champions_ago
            )
        })
        .collect();
    let mut footer = String::new();
    if !ctx.kept_ideas.is_empty() {
        footer += &format!("\nIdeas in the champion: {}\n", ctx.kept_ideas.join(", "));
    }
    footer += &format!("Retries left in this run: {}\n", ctx.retries_left);
    Optional {
        heading,
        items,
        keep: Keep::First,
        what: "promising attempts",
        footer,
    }
}

/// The digest in paragraphs, so that a cut never splits one.
fn lessons(ctx: &ProposalContext) -> Optional {
    Optional {
        heading: "# Lessons\n\n".into(),
        items: paragraphs(&ctx.lessons),
        keep: Keep::First,
        what: "paragraphs of lessons",
        footer: String::new(),
    }
}

fn profile(ctx: &ProposalContext) -> Optional {
    let Some(profile) = &ctx.profile else {
        return Optional {
            heading: String::new(),
            items: vec![],
            keep: Keep::First,
            what: "profile lines",
            footer: String::new(),
        };
    };
    Optional {
        heading: "\n# Champion profile\n\n".into(),
        items: profile.lines().map(|l| format!("{l}\n")).collect(),
        keep: Keep::First,
        what: "profile lines",
        footer: String::new(),
    }
}

fn paragraphs(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut current = String::new();
    for line in text.lines() {
        current += line;
        current.push('\n');
        if line.trim().is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::budget::Tokens;
    use crate::agent::AttemptSummary;
    use crate::referee::verdict::AttemptVerdict;
    use std::collections::BTreeMap;

    fn context() -> ProposalContext {
        let source = "int main(void)\n{\n\treturn 0;\n}\n".repeat(20);
        let files = BTreeMap::from([("treatment/server.c".to_string(), source)]);
        let mut ctx = ProposalContext::for_tests(files, std::path::Path::new(""));
        ctx.history = (1..=60)
            .map(|n| {
                AttemptSummary::measured(n, &format!("idea {n}"), "c0", AttemptVerdict::Discard)
            })
            .collect();
        ctx.lessons = (1..=200)
            .map(|n| format!("Lesson {n}: something measured.\n\n"))
            .collect();
        ctx.profile = Some("  40% io_uring_enter\n  10% tcp_close\n".repeat(30));
        ctx
    }

    /// Another server is described in its own words: its language, its
    /// paragraph, its code fences and its contract, not the C treatment's.
    #[test]
    fn the_prompt_speaks_of_the_target_and_its_contract() {
        let files = BTreeMap::from([("kv/src/main.cpp".to_string(), "int main() {}\n".into())]);
        let mut ctx = ProposalContext::for_tests(files, std::path::Path::new(""));
        ctx.target = crate::bench::servers::target::TargetConfig {
            language: "C++".into(),
            description: "An epoll keep-alive server.".into(),
            io_uring: false,
            ..Default::default()
        };
        ctx.contract.requests_per_connection = 8;
        ctx.contract.closes = Closer::Client;
        ctx.contract.response = "HTTP/1.1 200 OK\r\nDate: {date}\r\n\r\nok".into();
        ctx.contract.fields = BTreeMap::from([(
            "date".to_string(),
            crate::bench::load::contract::Shape::HttpDate,
        )]);
        let p = build(&ctx, "FORMAT", None).unwrap();
        assert!(
            p.contains("of a C++ server (the treatment). An epoll keep-alive server."),
            "{p}"
        );
        assert!(p.contains("```cpp\nint main() {}"), "{p}");
        assert!(
            p.contains("then 8 times: read a request") && p.contains("the client then shuts down"),
            "{p}"
        );
        assert!(
            p.contains("{date} in the response varies: any HTTP date"),
            "{p}"
        );
        assert!(!p.contains("io_uring") && !p.contains("```c\n"), "{p}");
    }

    #[test]
    fn an_unbudgeted_prompt_holds_everything() {
        let p = build(&context(), "FORMAT", None).unwrap();
        assert!(p.contains("#1 idea 1 ") && p.contains("#60 idea 60 "));
        assert!(p.contains("Lesson 200:") && !p.contains("omitted"));
    }

    #[test]
    fn a_budgeted_prompt_fits_and_keeps_the_source_and_the_newest_attempts() {
        let ctx = context();
        let counter = Tokens::CONSERVATIVE;
        let whole = counter.count(&build(&ctx, "FORMAT", None).unwrap());
        for tokens in [whole / 2, whole / 4] {
            let b = Budget { tokens, counter };
            let p = build(&ctx, "FORMAT", Some(&b)).unwrap();
            assert!(
                counter.count(&p) <= tokens,
                "{} > {tokens}",
                counter.count(&p)
            );
            assert!(
                p.contains(&ctx.files["treatment/server.c"]),
                "the source is whole"
            );
            assert!(p.contains("#60 idea 60 "), "the newest attempt stays");
            assert!(!p.contains("#1 idea 1 ") || !p.contains("Lesson 200:"));
            assert!(p.contains("omitted to fit the model's context window"));
        }
    }

    #[test]
    fn a_budget_below_the_required_parts_is_refused() {
        let b = Budget {
            tokens: 100,
            counter: Tokens::CONSERVATIVE,
        };
        let e = build(&context(), "FORMAT", Some(&b)).unwrap_err();
        assert!(e.needed > 100, "{e}");
    }
}
