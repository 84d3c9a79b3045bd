//! What the agents' enum-valued settings share. Each such setting is one
//! enum, defined beside what it decides: clap's `ValueEnum` derive gives the
//! command line its values (and `--help` and the man pages their text),
//! serde's kebab-case gives the `--config` file the same words, and where
//! the hooks see the setting its discriminant is the number they are
//! loaded with. This module gives logs and `srap status` that same word, so
//! no setting spells its values twice.

/// The word `value` is given on the command line and in the config file.
pub fn word<T: clap::ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

/// `Display` for setting enums: each value shows as its [`word`].
macro_rules! display_as_word {
    ($($setting:ty),+ $(,)?) => {$(
        impl std::fmt::Display for $setting {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&$crate::setting::word(self))
            }
        }
    )+};
}
pub(crate) use display_as_word;

#[cfg(test)]
mod tests {
    use std::fmt::Debug;

    use clap::ValueEnum;
    use serde::de::DeserializeOwned;

    use super::word;
    use crate::sender::choices::{
        BondMembers, LocalNicsPolicy, LocalPlacement, MptcpMode, PlacedEnds, ReceiverNicsMode,
        SourceRules,
    };

    /// Every value of `T`, written as its word under `key` in a config
    /// file, reads back as itself, and shows as that word.
    fn config_words_are_flag_values<T>(key: &str)
    where
        T: ValueEnum + DeserializeOwned + PartialEq + Debug + std::fmt::Display,
    {
        #[derive(serde::Deserialize)]
        struct Key<T> {
            value: T,
        }
        for value in T::value_variants() {
            let text = format!("value = \"{}\"", word(value));
            let parsed: Key<T> = toml::from_str(&text).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(&parsed.value, value, "{key}");
            assert_eq!(value.to_string(), word(value), "{key}");
        }
    }

    #[test]
    fn each_settings_config_words_are_its_flag_values() {
        config_words_are_flag_values::<PlacedEnds>("steer");
        config_words_are_flag_values::<LocalPlacement>("local-placement");
        config_words_are_flag_values::<LocalNicsPolicy>("local-nics");
        config_words_are_flag_values::<SourceRules>("source-rules");
        config_words_are_flag_values::<BondMembers>("bond-members");
        config_words_are_flag_values::<ReceiverNicsMode>("receiver-nics");
        config_words_are_flag_values::<MptcpMode>("mptcp");
    }
}
