//! Backend selection: names, availability, HALFSTEP_BACKEND, and forcing through the API.

use halfstep::{ALL_BACKENDS, BACKEND_ENV, Backend, Engine, Error};

#[test]
fn names_round_trip_and_unknown_names_are_errors() {
    for b in ALL_BACKENDS {
        assert_eq!(Backend::from_name(b.name()), Ok(b));
        assert_eq!(Backend::from_name(&b.name().to_uppercase()), Ok(b));
    }
    assert_eq!(
        Backend::from_name("sse9"),
        Err(Error::UnknownBackend {
            name: "sse9".into()
        })
    );
}

#[test]
fn available_backends_are_listed_and_unavailable_ones_refused() {
    let available = Backend::available();
    assert!(available.contains(&Backend::Reference) && available.contains(&Backend::Portable));
    assert_eq!(available[0], Backend::detect());
    for b in ALL_BACKENDS {
        match Engine::new(b) {
            Ok(e) => assert!(b.is_available() && e.backend() == b),
            Err(err) => {
                assert!(!b.is_available());
                assert_eq!(err, Error::BackendUnavailable { backend: b });
                println!("dispatch: backend {b} not available here");
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    assert!(!Backend::Neon.is_available());
    #[cfg(target_arch = "aarch64")]
    assert!(Backend::Neon.is_available() && !Backend::Avx2.is_available());
}

#[test]
fn the_environment_setting_selects_or_refuses() {
    assert_eq!(
        Engine::from_setting(None).unwrap().backend(),
        Backend::detect()
    );
    assert_eq!(
        Engine::from_setting(Some("auto")).unwrap().backend(),
        Backend::detect()
    );
    assert_eq!(
        Engine::from_setting(Some(" portable ")).unwrap().backend(),
        Backend::Portable
    );
    assert_eq!(
        Engine::from_setting(Some("fastest")),
        Err(Error::UnknownBackend {
            name: "fastest".into()
        })
    );
    let missing = ALL_BACKENDS.into_iter().find(|b| !b.is_available());
    if let Some(b) = missing {
        assert_eq!(
            Engine::from_setting(Some(b.name())),
            Err(Error::BackendUnavailable { backend: b })
        );
    }
}

#[test]
fn the_global_engine_follows_halfstep_backend() {
    // CI runs the suite once per forced backend; this checks the variable really took effect.
    match std::env::var(BACKEND_ENV) {
        Ok(v) if !v.trim().is_empty() && v.trim() != "auto" => match Backend::from_name(&v) {
            Ok(b) if b.is_available() => assert_eq!(Engine::global().unwrap().backend(), b),
            Ok(b) => assert_eq!(
                Engine::global(),
                Err(Error::BackendUnavailable { backend: b })
            ),
            Err(e) => assert_eq!(Engine::global(), Err(e)),
        },
        _ => assert_eq!(Engine::global().unwrap().backend(), Backend::detect()),
    }
    println!("dispatch: global engine = {:?}", Engine::global());
}
