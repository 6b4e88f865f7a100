//! `cache=fscache` as a library host uses it: the store's confirmations started in the
//! background when the mount is made travel before the guest's first use, which then
//! costs nothing more.

use std::time::{Duration, Instant};

use super::*;

#[tokio::test]
async fn a_store_confirmed_in_the_background_answers_the_first_use_without_a_request() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let store = tempfile::tempdir().unwrap();
    let spec = format!(
        "cache=fscache,cachetag=t,fscache_dir={}",
        store.path().display()
    );
    // A first mount learns a header (opened and read), a file's attributes and a link.
    let first_read = {
        let (ns, fs) = mount(&server, &spec).await;
        let header = open(&ns, &fs, "/usr/include/stdio.h", READ).await;
        let data = header.read_at(0, 4096).await.unwrap();
        ns.getattr("/a", true).await.unwrap();
        assert_eq!(&*ns.readlink("/link").await.unwrap(), "a");
        fs.persist().unwrap();
        data
    };

    let (ns, fs) = mount(&server, &spec).await;
    let before = rpcs(&fs, "walk");
    fs.confirm_store_in_background();
    // Sent without any use (the first use would wait for any still out).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ahead = fs.cache_stats().validated_ahead;
        if ahead > 0 && rpcs(&fs, "walk") - before == ahead {
            break;
        }
        assert!(Instant::now() < deadline, "{:?}", fs.cache_stats());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let sent = fs.session().counts().total();

    let header = open(&ns, &fs, "/usr/include/stdio.h", READ).await;
    assert_eq!(header.read_at(0, 4096).await.unwrap(), first_read);
    ns.getattr("/a", true).await.unwrap();
    assert_eq!(&*ns.readlink("/link").await.unwrap(), "a");
    assert_eq!(
        fs.session().counts().total(),
        sent,
        "the first use asked the server: {:?}",
        fs.session().counts().snapshot()
    );
    let stats = fs.cache_stats();
    assert_eq!(stats.validations, stats.validated_ahead, "{stats:?}");
}
