//! [`RssModel`]: a validated RSS description, ready to say where a flow lands.

use std::collections::BTreeSet;

use crate::protocol::FlowType;

use super::{
    description::{FieldsDescription, RssDescription},
    error::{DescriptionError, Unhashed},
    hash_function::HashFunction,
    input::{FlowTuple, HashFields, HashInput, InputXfrm},
    toeplitz::{ToeplitzKey, ToeplitzTable},
};

/// Indirection tables are at most this long (the u16 index space of ethtool).
const MAX_INDIR_LEN: usize = 1 << 16;
/// The most receive queues a description may name: an entry of the table
/// names one, and without `queue_cpu` every queue up to the highest named
/// gets a CPU, so an absurd queue number must not size that list.
const MAX_QUEUES: u32 = 1 << 16;
/// No NIC has a longer key; a longer one is a mistake in the file.
const MAX_KEY_LEN: usize = 256;

/// Where one hash lands on the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Landing {
    pub hash: u32,
    /// Indirection table entry, `hash % indir.len()`.
    pub index: u32,
    pub queue: u32,
    pub cpu: u32,
}

/// Which NIC of a flow a model stands for, which says how it reads the
/// tuples it is given (see [`crate::ends`]). Tuples are always given as the
/// connecting host sees them: `src` is the host that connects, `sport` the
/// port it chose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum End {
    /// The NIC of the host connected to: it hashes the tuple as given.
    #[default]
    Remote,
    /// The connecting host's own NIC: it hashes what comes back, the
    /// reverse tuple (the chosen port in the destination-port position).
    Local,
}

impl End {
    /// The tuple this end's NIC hashes for `flow` (given as the connecting
    /// host sees it).
    pub fn tuple(self, flow: &FlowTuple) -> FlowTuple {
        match self {
            Self::Remote => *flow,
            Self::Local => flow.reversed(),
        }
    }
}

/// Hashed fields per flow type, at [`FlowType::index`]: `None` where the
/// description does not say (UDP's, when discovery could not read them).
type FlowFields = [Option<HashFields>; FlowType::ALL.len()];

/// A receiver NIC's RSS, validated: Toeplitz key (as lookup tables), hashed
/// fields per flow type, input transform, indirection table and queue →
/// CPU map; and which end of the flows it is given it stands for ([`End`]:
/// the receiver's NIC unless made to face the connecting host's own).
#[derive(Debug, Clone)]
pub struct RssModel {
    end: End,
    hasher: ToeplitzTable,
    fields: FlowFields,
    xfrm: InputXfrm,
    indir: Vec<u32>,
    queue_cpu: Vec<u32>,
}

impl RssModel {
    pub fn from_json(text: &str) -> Result<Self, DescriptionError> {
        Self::from_description(&RssDescription::from_json(text)?)
    }

    pub fn from_description(desc: &RssDescription) -> Result<Self, DescriptionError> {
        let function = desc
            .hfunc
            .parse::<HashFunction>()
            .map_err(|e| DescriptionError::field("hfunc", e.to_string()))?;
        if !function.modelled() {
            return Err(DescriptionError::field(
                "hfunc",
                format!(
                    "hash function `{function}` is not modelled: SRAP predicts Toeplitz only \
                     (`ethtool -X DEV hfunc toeplitz` selects it)"
                ),
            ));
        }
        let key = ToeplitzKey::parse_hex(&desc.key)
            .map_err(|e| DescriptionError::field("key", e.to_string()))?;
        if key.as_bytes().len() > MAX_KEY_LEN {
            return Err(DescriptionError::field(
                "key",
                format!(
                    "{} bytes is longer than any NIC's key ({MAX_KEY_LEN} at most)",
                    key.as_bytes().len()
                ),
            ));
        }
        let xfrm = desc
            .input_xfrm
            .parse::<InputXfrm>()
            .map_err(|e| DescriptionError::field("input_xfrm", e.to_string()))?;
        let fields = flow_fields(&desc.fields)?;
        if desc.indir.is_empty() {
            return Err(DescriptionError::field(
                "indir",
                "the indirection table is empty: the NIC has no RSS (`ethtool -x DEV`)",
            ));
        }
        if desc.indir.len() > MAX_INDIR_LEN {
            return Err(DescriptionError::field(
                "indir",
                format!(
                    "{} entries; indirection tables have at most {MAX_INDIR_LEN}",
                    desc.indir.len()
                ),
            ));
        }
        let queue_cpu = match &desc.queue_cpu {
            Some(map) => {
                if map.is_empty() {
                    return Err(DescriptionError::field(
                        "queue_cpu",
                        "empty: list the CPU of every queue, or leave the field out",
                    ));
                }
                map.clone()
            }
            None => {
                if let Some((entry, queue)) = desc
                    .indir
                    .iter()
                    .enumerate()
                    .find(|(_, queue)| **queue >= MAX_QUEUES)
                {
                    return Err(DescriptionError::field(
                        "indir",
                        format!(
                            "entry {entry} names queue {queue}; NICs have at most {MAX_QUEUES} \
                             receive queues"
                        ),
                    ));
                }
                let queues = desc.indir.iter().max().map_or(0, |max| max + 1);
                (0..queues).collect()
            }
        };
        if let Some((entry, queue)) = desc
            .indir
            .iter()
            .enumerate()
            .find(|(_, queue)| **queue as usize >= queue_cpu.len())
        {
            return Err(DescriptionError::field(
                "indir",
                format!(
                    "entry {entry} names queue {queue}, but queue_cpu lists {} queues (0-{})",
                    queue_cpu.len(),
                    queue_cpu.len() - 1
                ),
            ));
        }
        Ok(Self {
            end: End::Remote,
            hasher: ToeplitzTable::new(key),
            fields,
            xfrm,
            indir: desc.indir.clone(),
            queue_cpu,
        })
    }

    pub fn to_description(&self) -> RssDescription {
        RssDescription {
            hfunc: "toeplitz".into(),
            key: self.hasher.key().to_string(),
            indir: self.indir.clone(),
            input_xfrm: self.xfrm.to_string(),
            fields: self.fields_description(),
            queue_cpu: Some(self.queue_cpu.clone()),
        }
    }

    /// The same NIC standing for `end` of the flows it is given: with
    /// [`End::Local`], this host's own NIC, hashing the reverse of each
    /// flow this host opens. Everything built on [`RssModel::hash`] (the
    /// solver, the port tables) then plans for that NIC unchanged.
    pub fn facing(mut self, end: End) -> Self {
        self.end = end;
        self
    }

    pub fn end(&self) -> End {
        self.end
    }

    pub fn key(&self) -> &ToeplitzKey {
        self.hasher.key()
    }

    pub fn xfrm(&self) -> InputXfrm {
        self.xfrm
    }

    /// The fields this NIC hashes `flow`'s flows with, if the description
    /// says (TCP's always are).
    pub fn fields(&self, flow: FlowType) -> Option<HashFields> {
        self.fields[flow.index()]
    }

    /// [`RssModel::fields`], or why `flow`'s flows cannot be planned for:
    /// what planning for a protocol asks first.
    pub fn hashed(&self, flow: FlowType) -> Result<HashFields, Unhashed> {
        self.fields(flow).ok_or(Unhashed(flow))
    }

    /// The fields `tuple` is hashed with: its flow type's. A flow type the
    /// description gives none for hashes as the whole 4-tuple here, a
    /// guess that nothing plans with: planning asks [`RssModel::hashed`]
    /// first and refuses it.
    fn fields_for(&self, tuple: &FlowTuple) -> HashFields {
        self.fields(tuple.flow_type()).unwrap_or(HashFields::ALL)
    }

    /// Every known flow type's fields in ethtool letters, as a description
    /// writes them.
    fn fields_description(&self) -> FieldsDescription {
        let mut described = FieldsDescription::default();
        for flow in FlowType::ALL {
            if let Some(fields) = self.fields(flow) {
                described.set(flow, fields.to_string());
            }
        }
        described
    }

    pub fn indir(&self) -> &[u32] {
        &self.indir
    }

    pub fn queue_cpu(&self) -> &[u32] {
        &self.queue_cpu
    }

    /// log2 of the table size when it is a power of two: the index is then the
    /// hash's low bits, which keeps port selection linear.
    pub fn index_bits(&self) -> Option<u32> {
        self.indir
            .len()
            .is_power_of_two()
            .then(|| self.indir.len().trailing_zeros())
    }

    /// CPUs some indirection entry reaches; queues on one CPU count once.
    pub fn reachable_cpus(&self) -> BTreeSet<u32> {
        self.indir
            .iter()
            .map(|queue| self.queue_cpu[*queue as usize])
            .collect()
    }

    /// The bytes this NIC hashes for `tuple` (as the connecting host sees
    /// it: reversed first for [`End::Local`]), with its flow type's fields.
    pub fn input(&self, tuple: &FlowTuple) -> HashInput {
        HashInput::new(&self.end.tuple(tuple), self.fields_for(tuple), self.xfrm)
    }

    #[inline]
    pub fn hash(&self, tuple: &FlowTuple) -> u32 {
        self.hasher.hash(self.input(tuple).as_bytes())
    }

    #[inline]
    pub fn landing_of_hash(&self, hash: u32) -> Landing {
        let index = hash % self.indir.len() as u32;
        let queue = self.indir[index as usize];
        Landing {
            hash,
            index,
            queue,
            cpu: self.queue_cpu[queue as usize],
        }
    }

    pub fn landing(&self, tuple: &FlowTuple) -> Landing {
        self.landing_of_hash(self.hash(tuple))
    }
}

/// Each flow type's fields the description gives, parsed: every one it
/// names becomes part of the model, whatever SRAP steers now.
fn flow_fields(described: &FieldsDescription) -> Result<FlowFields, DescriptionError> {
    let mut fields = [None; FlowType::ALL.len()];
    for (flow, letters) in described.known() {
        let parsed = letters
            .parse::<HashFields>()
            .map_err(|e| DescriptionError::field(field_name(flow), e.to_string()))?;
        fields[flow.index()] = Some(parsed);
    }
    Ok(fields)
}

/// The description's name of `flow`'s fields, as its errors name them.
const fn field_name(flow: FlowType) -> &'static str {
    ["fields.tcp4", "fields.tcp6", "fields.udp4", "fields.udp6"][flow.index()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        protocol::Protocol,
        rss::{FlowTuple, embedded_default},
    };

    fn with_udp4(letters: &str) -> RssDescription {
        let mut desc = embedded_default();
        desc.fields.set(FlowType::UDP4, letters.into());
        desc
    }

    #[test]
    fn a_models_fields_are_its_descriptions_per_flow_type() {
        let model = RssModel::from_description(&with_udp4("sd")).unwrap();
        assert_eq!(model.fields(FlowType::TCP4), Some(HashFields::ALL));
        assert_eq!(model.fields(FlowType::UDP4), Some("sd".parse().unwrap()));
        assert_eq!(model.fields(FlowType::UDP6), None);
        assert_eq!(model.hashed(FlowType::UDP6), Err(Unhashed(FlowType::UDP6)));
        let back = model.to_description().fields;
        assert_eq!(back.of(FlowType::UDP4), Some("sd"));
        assert_eq!(back.of(FlowType::UDP6), None);
    }

    #[test]
    fn a_tuple_is_hashed_with_its_protocols_fields() {
        let model = RssModel::from_description(&with_udp4("sd")).unwrap();
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let udp = |sport| FlowTuple::of(Protocol::Udp, a, sport, b, 53).unwrap();
        let tcp = |sport| FlowTuple::new(a, sport, b, 53).unwrap();
        // UDP's fields leave the ports out: every source port hashes alike.
        assert_eq!(model.hash(&udp(1)), model.hash(&udp(2)));
        assert_ne!(model.hash(&tcp(1)), model.hash(&tcp(2)));
    }

    #[test]
    fn unmodelled_udp_fields_are_refused_by_name() {
        let err = RssModel::from_description(&with_udp4("sdt")).unwrap_err();
        assert!(err.to_string().contains("`fields.udp4`"), "{err}");
    }
}
