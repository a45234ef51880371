//! Property tests: no byte sequence panics any decoder or state machine;
//! encrypted packets round-trip.

use proptest::prelude::*;

use super::*;
use crate::bmc::ipmi::commands::parse_device_id;
use crate::bmc::ipmi::fru;

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400), suite17 in any::<bool>()) {
        let _ = wire::decode(&data, None);
        let suite = if suite17 { CipherSuite::Suite17 } else { CipherSuite::Suite3 };
        let keys = SessionKeys::derive(suite, PASSWORD, &inputs());
        let _ = wire::decode(&data, Some(&Security { suite, keys: &keys }));
        let _ = wire::decode_response(&data);
        let _ = crypto::decrypt_payload(&keys, &data);
        let _ = fru::parse(&data);
        let _ = parse_device_id(&data);
        let _ = crate::bmc::ipmi::commands::parse_boot_flags(&data);
        let _ = crate::bmc::ipmi::commands::parse_fru_read(&data);
        let _ = crate::bmc::ipmi::commands::parse_system_guid(&data);
    }

    #[test]
    fn arbitrary_bytes_with_an_ipmi_header_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..200), auth in prop_oneof![Just(0u8), Just(6u8)], ptype in any::<u8>()) {
        let mut data = vec![0x06, 0x00, 0xff, 0x07, auth, ptype];
        data.extend_from_slice(&tail);
        let _ = wire::decode(&data, None);
        // Every handshake state, and an established session.
        let suite = CipherSuite::Suite17;
        let mut hs = handshake(suite, PASSWORD);
        let _ = hs.on_packet(&data);
        let mut hs = handshake(suite, PASSWORD);
        let _ = hs.on_packet(&auth_caps_reply());
        let _ = hs.on_packet(&data);
        let _ = hs.on_packet(&open_reply(suite, 9, 0));
        let _ = hs.on_packet(&data);
        let _ = hs.on_packet(&rakp2(suite, 9, PASSWORD));
        let _ = hs.on_packet(&data);
        let mut s = some_session(true);
        let p = Pending { netfn: 0, cmd: 1, rq_seq: 1 };
        let _ = s.response(&data, &p);
    }

    #[test]
    fn encrypted_packets_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..300), iv in any::<[u8; 16]>(), suite17 in any::<bool>(), seq in 1u32..) {
        let suite = if suite17 { CipherSuite::Suite17 } else { CipherSuite::Suite3 };
        let keys = SessionKeys::derive(suite, PASSWORD, &inputs());
        let sec = Security { suite, keys: &keys };
        let pkt = wire::encode_v2(payload::IPMI, 42, seq, &payload, Some((&sec, &iv))).expect("encode");
        // Integrity covers from the auth type on and is a multiple of 4 bytes.
        prop_assert_eq!((pkt.len() - 4 - suite.icv_len()) % 4, 0);
        let back = wire::decode(&pkt, Some(&sec)).expect("decode");
        prop_assert_eq!(back.payload, payload);
        prop_assert_eq!(back.session_id, 42);
        prop_assert_eq!(back.seq, seq);
    }
}
