//! The RSS description as it travels: [`WireDescription`], a field-for-field
//! mirror of [`RssDescription`] (whose serde attributes suit JSON, not
//! bincode), and the one layout of the protocol that depends on the
//! session's version. It must not know the messages that carry it: they
//! set the layout their session has (`Message::at_version`).

use bincode::{
    Decode, Encode,
    de::Decoder,
    enc::Encoder,
    error::{DecodeError, EncodeError},
};

use crate::{
    protocol::FlowType,
    rss::{FieldsDescription, RssDescription},
};

/// The first protocol version whose [`WireDescription`] carries UDP's
/// hashed fields ([`UdpFields`]); a peer of an older one is sent, and
/// sends, the layout without them.
pub const UDP_FIELDS_SINCE: u16 = 10;

/// [`RssDescription`] as it travels: TCP's hashed fields, and UDP's in a
/// session of protocol [`UDP_FIELDS_SINCE`] on. Its layout is the
/// version-6 one up to `queue_cpu`; `udp` follows it from protocol 10 on,
/// so a peer of 9 or older reads the layout it knows (and plans TCP, which
/// needs nothing more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireDescription {
    pub hfunc: String,
    pub key: String,
    pub indir: Vec<u32>,
    pub input_xfrm: String,
    pub fields_tcp4: String,
    pub fields_tcp6: String,
    pub queue_cpu: Option<Vec<u32>>,
    /// UDP's fields: `Some` (each part `None` where the NIC did not say)
    /// in a session of protocol 10 on, `None` in an older one, which does
    /// not carry them. Encoding sets it as the session's version has it
    /// (`Message::at_version`).
    pub udp: Option<UdpFields>,
}

/// UDP's hashed fields over IPv4 and IPv6, in ethtool letters (protocol
/// 10 on; `None` where the NIC did not say).
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct UdpFields {
    pub udp4: Option<String>,
    pub udp6: Option<String>,
}

impl WireDescription {
    /// With UDP's fields carried or not, as a session that does (or does
    /// not) carry them encodes this description.
    pub(super) fn carry_udp(&mut self, carried: bool) {
        if !carried {
            self.udp = None;
        } else if self.udp.is_none() {
            self.udp = Some(UdpFields::default());
        }
    }
}

impl Encode for WireDescription {
    /// The version-6 layout, then `udp` when it is carried (protocol 10 on:
    /// `Message::at_version` set it so).
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), EncodeError> {
        self.hfunc.encode(encoder)?;
        self.key.encode(encoder)?;
        self.indir.encode(encoder)?;
        self.input_xfrm.encode(encoder)?;
        self.fields_tcp4.encode(encoder)?;
        self.fields_tcp6.encode(encoder)?;
        self.queue_cpu.encode(encoder)?;
        match &self.udp {
            Some(udp) => udp.encode(encoder),
            None => Ok(()),
        }
    }
}

impl Decode<u16> for WireDescription {
    /// The layout of the frame's version (the decoder's context): `udp`
    /// read from protocol 10 on.
    fn decode<D: Decoder<Context = u16>>(decoder: &mut D) -> Result<Self, DecodeError> {
        Ok(Self {
            hfunc: Decode::decode(decoder)?,
            key: Decode::decode(decoder)?,
            indir: Decode::decode(decoder)?,
            input_xfrm: Decode::decode(decoder)?,
            fields_tcp4: Decode::decode(decoder)?,
            fields_tcp6: Decode::decode(decoder)?,
            queue_cpu: Decode::decode(decoder)?,
            udp: if *decoder.context() >= UDP_FIELDS_SINCE {
                Some(UdpFields::decode(decoder)?)
            } else {
                None
            },
        })
    }
}
bincode::impl_borrow_decode_with_context!(WireDescription, u16);

impl From<&RssDescription> for WireDescription {
    fn from(d: &RssDescription) -> Self {
        let udp = |flow| d.fields.of(flow).map(str::to_owned);
        Self {
            hfunc: d.hfunc.clone(),
            key: d.key.clone(),
            indir: d.indir.clone(),
            input_xfrm: d.input_xfrm.clone(),
            fields_tcp4: d.fields.tcp4.clone(),
            fields_tcp6: d.fields.tcp6.clone(),
            queue_cpu: d.queue_cpu.clone(),
            udp: Some(UdpFields {
                udp4: udp(FlowType::UDP4),
                udp6: udp(FlowType::UDP6),
            }),
        }
    }
}

impl From<WireDescription> for RssDescription {
    fn from(w: WireDescription) -> Self {
        let mut fields = FieldsDescription::tcp(w.fields_tcp4, w.fields_tcp6);
        let udp = w.udp.unwrap_or_default();
        for (flow, letters) in [(FlowType::UDP4, udp.udp4), (FlowType::UDP6, udp.udp6)] {
            if let Some(letters) = letters {
                fields.set(flow, letters);
            }
        }
        Self {
            hfunc: w.hfunc,
            key: w.key,
            indir: w.indir,
            input_xfrm: w.input_xfrm,
            fields,
            queue_cpu: w.queue_cpu,
        }
    }
}
