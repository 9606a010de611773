//! The context budget. A prompt the model's context window cannot hold is
//! refused by the server (llama.cpp: HTTP 400) or silently truncated, so the
//! prompt is cut to a budget before it is sent: what the model must see
//! whole comes first, and the optional parts are filled in a stated order
//! of priority until the budget is spent.

/// Characters per token, to count a prompt without a tokenizer at hand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tokens {
    chars_per_token: f64,
}

impl Tokens {
    /// Below what BPE tokenizers give on C and English prose (SmolLM2's
    /// gives 2.6 on the treatment's source), so an uncalibrated count errs
    /// long and the prompt short.
    pub const CONSERVATIVE: Tokens = Tokens {
        chars_per_token: 2.5,
    };

    /// The ratio a tokenizer gave on a sample of the text to be cut.
    pub fn calibrated(chars: usize, tokens: usize) -> Self {
        if chars == 0 || tokens == 0 {
            return Self::CONSERVATIVE;
        }
        Self {
            chars_per_token: chars as f64 / tokens as f64,
        }
    }

    /// The same ratio, corrected by how much longer the server counted a
    /// prompt than this estimate did.
    pub fn scaled(self, estimated: usize, counted: usize) -> Self {
        if estimated == 0 || counted <= estimated {
            return self;
        }
        Self {
            chars_per_token: self.chars_per_token * estimated as f64 / counted as f64,
        }
    }

    /// The ratio of the two that counts more tokens.
    pub fn denser(self, other: Tokens) -> Tokens {
        if other.chars_per_token < self.chars_per_token {
            other
        } else {
            self
        }
    }

    pub fn count(&self, text: &str) -> usize {
        (text.chars().count() as f64 / self.chars_per_token).ceil() as usize
    }
}

/// The room a prompt may take: `tokens`, counted by `counter`.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub tokens: usize,
    pub counter: Tokens,
}

/// How a context window divides between the reply and the prompt: the
/// reply gets what was configured, but at most an eighth of the window (at
/// least 256 tokens: a proposal of one edit needs about 200), and
/// `overhead` (the system message, the chat template's tokens, a repair
/// round's extra turns) comes off the prompt.
pub fn split(context: usize, max_reply: usize, overhead: usize) -> (usize, usize) {
    let reply = max_reply.min((context / 8).max(256));
    (reply, context.saturating_sub(reply + overhead))
}

/// Which end of an optional part survives a cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// The first items (cheapest pool entries, the lessons' seed, the
    /// profile's hottest symbols).
    First,
    /// The last items (the most recent attempts).
    Last,
}

/// A part of the prompt that may be cut item by item.
pub struct Optional {
    pub heading: String,
    pub items: Vec<String>,
    pub keep: Keep,
    /// What an item is, for the note on a cut: "earlier attempts".
    pub what: &'static str,
    /// Shown whole after the items (it is short).
    pub footer: String,
}

impl Optional {
    pub fn render(&self, kept: usize) -> String {
        let kept = kept.min(self.items.len());
        let omitted = self.items.len() - kept;
        let note = format!(
            "({omitted} {} omitted to fit the model's context window)\n",
            self.what
        );
        let mut s = self.heading.clone();
        match self.keep {
            Keep::First => {
                self.items[..kept].iter().for_each(|i| s += i);
                if omitted > 0 {
                    s += &note;
                }
            }
            Keep::Last => {
                if omitted > 0 {
                    s += &note;
                }
                self.items[omitted..].iter().for_each(|i| s += i);
            }
        }
        s + &self.footer
    }

    fn in_keep_order(&self) -> Box<dyn Iterator<Item = &String> + '_> {
        match self.keep {
            Keep::First => Box::new(self.items.iter()),
            Keep::Last => Box::new(self.items.iter().rev()),
        }
    }
}

/// The required text alone does not fit.
#[derive(Debug, PartialEq)]
pub struct Overflow {
    pub needed: usize,
    pub allowed: usize,
}

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the prompt's required parts (goal, contract, rules, reply format and the champion's \
             source) take about {} tokens, and the model's context window leaves {} for the prompt",
            self.needed, self.allowed
        )
    }
}

/// How many items of each part fit: `parts` in display order, `priority`
/// their indices in the order they are filled. Every part's heading and
/// cut note are counted in before any item.
pub fn fit(
    required: &str,
    parts: &[Optional],
    priority: &[usize],
    budget: &Budget,
) -> Result<Vec<usize>, Overflow> {
    let count = |s: &str| budget.counter.count(s);
    let bare: usize = parts.iter().map(|p| count(&p.render(0))).sum();
    let needed = count(required) + bare;
    if needed > budget.tokens {
        return Err(Overflow {
            needed,
            allowed: budget.tokens,
        });
    }
    let mut left = budget.tokens - needed;
    let mut kept = vec![0; parts.len()];
    for &i in priority {
        for item in parts[i].in_keep_order() {
            let cost = count(item);
            if cost > left {
                break;
            }
            left -= cost;
            kept[i] += 1;
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(items: &[&str], keep: Keep) -> Optional {
        Optional {
            heading: "# H\n".into(),
            items: items.iter().map(|s| s.to_string()).collect(),
            keep,
            what: "items",
            footer: String::new(),
        }
    }

    /// One character per token, so counts are lengths.
    const ONE: Tokens = Tokens {
        chars_per_token: 1.0,
    };

    fn budget(tokens: usize) -> Budget {
        Budget {
            tokens,
            counter: ONE,
        }
    }

    #[test]
    fn parts_fill_in_priority_order_and_keep_their_end() {
        let parts = [
            part(&["old1\n", "mid1\n", "new1\n"], Keep::Last),
            part(&["seed\n", "more\n"], Keep::First),
        ];
        let bare: usize = parts.iter().map(|p| p.render(0).len()).sum();
        // Room for the required text, the bare parts and three items of five characters.
        let b = budget(3 + bare + 15);
        let kept = fit("req", &parts, &[1, 0], &b).unwrap();
        assert_eq!(kept, vec![1, 2], "the second part first, then what is left");
        let history = parts[0].render(kept[0]);
        assert!(history.contains("new") && !history.contains("old"));
        assert!(history.starts_with("# H\n(2 items omitted"));
        let lessons = parts[1].render(kept[1]);
        assert!(lessons.contains("seed\nmore\n") && !lessons.contains("omitted"));
    }

    #[test]
    fn required_text_that_cannot_fit_is_an_overflow() {
        let e = fit("0123456789", &[], &[], &budget(5)).unwrap_err();
        assert_eq!(
            e,
            Overflow {
                needed: 10,
                allowed: 5
            }
        );
        assert!(e.to_string().contains("leaves 5"));
    }

    #[test]
    fn a_cut_stops_at_the_first_item_that_does_not_fit() {
        let parts = [part(&["a\n", "a long item\n", "b\n"], Keep::First)];
        let bare = parts[0].render(0).len();
        let kept = fit("", &parts, &[0], &budget(bare + 4)).unwrap();
        assert_eq!(kept, vec![1], "items stay contiguous: no skipping ahead");
    }

    #[test]
    fn the_reply_gets_at_most_an_eighth_of_the_window() {
        assert_eq!(split(8192, 8192, 100), (1024, 8192 - 1024 - 100));
        assert_eq!(split(8192, 512, 100), (512, 8192 - 612));
        assert_eq!(split(1024, 8192, 0), (256, 768));
    }

    #[test]
    fn a_server_count_above_the_estimate_shrinks_the_ratio() {
        let t = Tokens::calibrated(300, 100);
        assert_eq!(t.count("abcdef"), 2);
        let t = t.scaled(100, 200);
        assert_eq!(t.count("abcdef"), 4);
        assert_eq!(t.scaled(100, 50), t, "a shorter count never loosens it");
    }
}
