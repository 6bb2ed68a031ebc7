//! `make test` writes only to servers the project started itself: a user's own Redis
//! on the standard port is never touched.

#[tokio::test]
async fn the_tests_recognise_the_projects_own_test_redis() {
    assert!(
        testkit::is_project_test_redis(testkit::PROJECT_TEST_REDIS)
            .await
            .expect("`make test` starts it"),
        "the server on 6390 is not the one `make services` started in .run/redis-test"
    );
}

#[tokio::test]
async fn the_tests_refuse_a_redis_the_project_did_not_start() {
    let someone_elses = testkit::PrivateRedis::start();
    assert!(!testkit::is_project_test_redis(&someone_elses.url()).await.unwrap());
}

#[test]
fn the_tests_default_to_the_projects_own_port_not_the_standard_one() {
    if std::env::var("SECKILL_TEST_REDIS_URL").is_err() {
        assert!(
            testkit::redis_url().starts_with("redis://127.0.0.1:6390"),
            "{}",
            testkit::redis_url()
        );
    }
}
