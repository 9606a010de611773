//! The agents `--agent` can name, spelled as `run.agent` and the agent
//! factory spell them.

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AgentKind {
    Playbook,
    #[value(name = "openai")]
    OpenAi,
    Anthropic,
    Local,
    Command,
}

impl AgentKind {
    /// The name the agent factory takes.
    pub fn name(self) -> &'static str {
        match self {
            AgentKind::Playbook => "playbook",
            AgentKind::OpenAi => "openai",
            AgentKind::Anthropic => "anthropic",
            AgentKind::Local => "local",
            AgentKind::Command => "command",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_spells_each_agent_as_the_factory_does() {
        let names: Vec<String> = AgentKind::value_variants()
            .iter()
            .map(|a| {
                let v = a.to_possible_value().unwrap();
                assert_eq!(v.get_name(), a.name());
                v.get_name().to_string()
            })
            .collect();
        assert_eq!(
            names,
            ["playbook", "openai", "anthropic", "local", "command"]
        );
    }

    #[test]
    fn an_unknown_agent_is_refused() {
        assert!(AgentKind::from_str("local", false).is_ok());
        assert!(AgentKind::from_str("gpt", false).is_err());
        assert!(AgentKind::from_str("OpenAI", false).is_err());
    }
}
