//! The flags of `srap-agent detach`.

use std::path::PathBuf;

use srap_daemon::sender::DEFAULT_PIN_DIR;

#[derive(clap::Args, Debug, Clone)]
pub struct DetachArgs {
    /// The pin directory `srap-agent sender` used.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_PIN_DIR)]
    pub pin_dir: PathBuf,
}
