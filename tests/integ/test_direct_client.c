/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_direct_client.c: the IM client and the room-event IM actions
 * (publish/tim_client.c, tim_events.c) and the activity sink
 * (publish/sink_activity.c) against the stand-ins of tests/standins, run as
 * separate processes: error classes, UserSig regeneration, Random dedupe,
 * EnsureGroup, AVChatRoom kick fallback, timeouts, peer down and back.
 */
#include "helpers.h"

#include "conf/conf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/xmalloc.h"
#include "publish/sink.h"
#include "publish/sink_activity.h"
#include "publish/tim_client.h"
#include "room_events.pb-c.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SECRET "5bd2850fff3ecb11d7c805251c51ee463a25727bddc2385f3fa8bfee1bb93b5e"
#define APPID 1400000000

static char *tmp;
static const char *src;
static int im_port;
static pid_t im_pid;
static char cert[512], key[512];

/* ---- processes ---------------------------------------------------------------------- */

static void
wait_port(int port, pid_t pid)
{
    for (int i = 0; i < 300; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM, 0), st;
        int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;

        close(fd);
        if (ok)
            return;
        if (waitpid(pid, &st, WNOHANG) == pid)
            fail_msg("stand-in on port %d exited", port);
        usleep(50000);
    }
    fail_msg("stand-in did not listen on %d", port);
}

static pid_t
spawn(char *const argv[], const char *logname)
{
    char *log = xasprintf("%s/%s", tmp, logname);
    pid_t pid = fork();

    if (pid == 0) {
        FILE *f = fopen(log, "a");
        if (f != NULL) {
            dup2(fileno(f), 1);
            dup2(fileno(f), 2);
        }
        setenv("IM_STANDIN_SECRET", SECRET, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    free(log);
    return pid;
}

static void
stop(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

static void
im_start(void)
{
    char port[16], appid[16], *script = xasprintf("%s/tests/standins/im_standin.py", src);
    char *state = xasprintf("%s/im-state.json", tmp);
    char *argv[] = {"python3", script,          "--port",  port,         "--cert",
                    cert,      "--key",         key,       "--sdkappid", appid,
                    "--admin", "administrator", "--state", state,        NULL};

    snprintf(port, sizeof(port), "%d", im_port);
    snprintf(appid, sizeof(appid), "%d", APPID);
    im_pid = spawn(argv, "im-standin.log");
    wait_port(im_port, im_pid);
    free(script);
    free(state);
}

/* ---- stand-in test endpoints (libcurl) ----------------------------------------------- */

static size_t
collect(char *d, size_t s, size_t n, void *arg)
{
    char **buf = arg;
    size_t old = *buf ? strlen(*buf) : 0;

    *buf = xrealloc(*buf, old + s * n + 1);
    memcpy(*buf + old, d, s * n);
    (*buf)[old + s * n] = '\0';
    return s * n;
}

static json_t *
im_http(const char *path, const char *body)
{
    CURL *h = curl_easy_init();
    char *url = xasprintf("https://127.0.0.1:%d%s", im_port, path), *buf = NULL;
    json_t *j;

    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, cert);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
    if (body != NULL)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_cleanup(h);
    j = json_loads(buf, 0, NULL);
    assert_non_null(j);
    free(buf);
    free(url);
    return j;
}

static void
im_control(const char *body)
{
    json_decref(im_http("/_control", body));
}

/* Number of recorded calls of api (dup: -1 any, 0 new, 1 duplicates). */
static size_t
im_calls(const char *api, int dup)
{
    json_t *calls = im_http("/_calls", NULL), *c;
    size_t i, n = 0;

    json_array_foreach(calls, i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "api")), api) != 0)
            continue;
        if (dup < 0 || json_is_true(json_object_get(c, "dup")) == (dup == 1))
            n++;
    }
    json_decref(calls);
    return n;
}

/* Number of stored messages in group whose Data has event_id. */
static size_t
im_messages(const char *group, const char *event_id)
{
    json_t *st = im_http("/_state", NULL), *m;
    size_t i, n = 0;

    json_array_foreach(json_object_get(st, "messages"), i, m)
    {
        const char *data = json_string_value(json_object_get(m, "Data"));
        if (strcmp(json_string_value(json_object_get(m, "GroupId")), group) == 0 && data &&
            strstr(data, event_id) != NULL)
            n++;
    }
    json_decref(st);
    return n;
}

static json_t *
im_group(const char *group)
{
    json_t *st = im_http("/_state", NULL);
    json_t *g = json_incref(json_object_get(json_object_get(st, "groups"), group));

    json_decref(st);
    return g;
}

/* ---- fixtures ------------------------------------------------------------------------- */

static struct conf_tencent_im
im_conf(const char *type)
{
    static char url[64];
    struct conf_tencent_im c = {
        .enabled = true,
        .sdk_app_id = APPID,
        .admin_identifier = "administrator",
        .secret_key_env = "TIM_TEST_SECRET",
        .secret_key_file = "",
        .usersig_ttl_ms = 86400000,
        .ca_file = cert,
        .timeout_ms = 1500,
    };
    snprintf(url, sizeof(url), "https://127.0.0.1:%d", im_port);
    c.base_url = url;
    c.group_type = (char *)type;
    return c;
}

static struct tim_client *
client(const char *type)
{
    struct conf_tencent_im cfg = im_conf(type);
    struct tim_client *c = NULL;
    char err[256];

    assert_int_equal(tim_client_open(&c, &cfg, err, sizeof(err)), 0);
    return c;
}

/* A packed envelope of one event with payload msg. *len gets its size. */
static uint8_t *
envelope(const char *event_id, const char *room, const char *type, const ProtobufCMessage *msg,
         size_t *len)
{
    Roomd__V1__RoomOutboxEvent e = ROOMD__V1__ROOM_OUTBOX_EVENT__INIT;
    uint8_t *pl = xmalloc(protobuf_c_message_get_packed_size(msg)), *out;

    e.event_id = (char *)event_id;
    e.app_code = "hyapp";
    e.room_id = (char *)room;
    e.room_version = 1;
    e.event_type = (char *)type;
    e.occurred_at_ms = 1700000000000; /* fixed, as a row's created_at is */
    e.command_id = "cmd-1";
    e.payload.len = protobuf_c_message_pack(msg, pl);
    e.payload.data = pl;
    *len = roomd__v1__room_outbox_event__get_packed_size(&e);
    out = xmalloc(*len);
    roomd__v1__room_outbox_event__pack(&e, out);
    free(pl);
    return out;
}

static int
deliver(struct tim_client *c, const char *event_id, const char *room, const char *type,
        const ProtobufCMessage *msg, char *err, size_t errlen)
{
    size_t len;
    uint8_t *env = envelope(event_id, room, type, msg, &len);
    int rc = tim_client_deliver(c, env, len, NULL, clock_mono_ms() + 5000, err, errlen);

    free(env);
    return rc;
}

static int
setup(void **state)
{
    (void)state;
    src = getenv("ROOMD_SOURCE_DIR") ? getenv("ROOMD_SOURCE_DIR") : ".";
    tmp = th_tmpdir();
    snprintf(cert, sizeof(cert), "%s/cert.pem", tmp);
    snprintf(key, sizeof(key), "%s/key.pem", tmp);
    char *cmd = xasprintf("openssl req -x509 -newkey rsa:2048 -nodes -keyout %s -out %s -days 2 "
                          "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 "
                          ">/dev/null 2>&1",
                          key, cert);
    if (system(cmd) != 0)
        th_skip_or_fail("openssl CLI missing");
    free(cmd);
    setenv("TIM_TEST_SECRET", SECRET, 1);
    im_port = th_free_port();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    im_start();
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    stop(&im_pid);
    curl_global_cleanup();
    free(tmp);
    return 0;
}

/* ---- IM tests ------------------------------------------------------------------------- */

static void
test_ensure_group(void **state)
{
    struct tim_client *c = client("AVChatRoom"), *other = client("Public");
    char err[256];
    json_t *g;

    (void)state;
    assert_int_equal(tim_ensure_group(c, "hyapp_g1", "a title that is longer than thirty bytes",
                                      clock_mono_ms() + 3000, err, sizeof(err)),
                     0);
    g = im_group("hyapp_g1");
    assert_string_equal(json_string_value(json_object_get(g, "Type")), "AVChatRoom");
    assert_int_equal(strlen(json_string_value(json_object_get(g, "Name"))), 30);
    json_decref(g);
    /* Again: 10025 "exists", confirmed by get_group_info. */
    assert_int_equal(tim_ensure_group(c, "hyapp_g1", "t", clock_mono_ms() + 3000, err, sizeof(err)),
                     0);
    assert_int_equal(im_calls("get_group_info", -1), 1);
    /* The stand-in verified every UserSig (decode + recomputed HMAC). */
    json_t *calls = im_http("/_calls", NULL), *call;
    size_t i;
    json_array_foreach(calls, i, call) assert_true(json_is_true(json_object_get(call, "sig_ok")));
    json_decref(calls);
    /* Exists with another type: permanent. */
    assert_int_equal(
        tim_ensure_group(other, "hyapp_g1", "t", clock_mono_ms() + 3000, err, sizeof(err)),
        ROOMD_EPERM);
    assert_non_null(strstr(err, "tim 10025"));
    assert_non_null(strstr(err, "AVChatRoom"));
    tim_client_close(c);
    tim_client_close(other);
}

static void
test_error_classes(void **state)
{
    struct tim_client *c = client("AVChatRoom");
    char err[256];
    int code;

    (void)state;
    assert_int_equal(
        tim_ensure_group(c, "hyapp_g2", "g2", clock_mono_ms() + 3000, err, sizeof(err)), 0);
    im_control("{\"fail\": {\"api\": \"send_group_msg\", \"code\": 80001}}");
    assert_int_equal(tim_send_group_custom(c, "hyapp_g2", "{\"event_id\":\"e-perm\"}", "x",
                                           "e-perm", "High", clock_mono_ms() + 3000, &code, err,
                                           sizeof(err)),
                     ROOMD_EPERM);
    assert_int_equal(code, 80001);
    assert_memory_equal(err, "tim 80001: ", 11);

    /* IM's rate-limit answer is waited out and sent again within the call */
    im_control("{\"fail\": {\"api\": \"send_group_msg\", \"code\": 10023}}");
    assert_int_equal(tim_send_group_custom(c, "hyapp_g2", "{}", "x", "e-rate", "High",
                                           clock_mono_ms() + 3000, &code, err, sizeof(err)),
                     0);
    /* Still rate-limited at the deadline (IM's code, HTTP 429): ROOMD_ELIMIT, an outage to
     * the sinks and consumer groups (docs/direct.md), and the probes' "IM rate-limits" */
    im_control("{\"fail\": {\"api\": \"send_group_msg\", \"code\": 10023, "
               "\"for_ms\": 1500}}");
    assert_int_equal(tim_send_group_custom(c, "hyapp_g2", "{}", "x", "e-rate2", "High",
                                           clock_mono_ms() + 600, &code, err, sizeof(err)),
                     ROOMD_ELIMIT);
    assert_int_equal(code, 10023);
    assert_true(tim_client_rate_limited(c, 1000));
    usleep(1200 * 1000); /* the scripted limit is over */
    im_control("{\"http_status\": {\"api\": \"send_group_msg\", \"status\": 429}}");
    assert_int_equal(tim_send_group_custom(c, "hyapp_g2", "{}", "x", "e-429", "High",
                                           clock_mono_ms() + 3000, &code, err, sizeof(err)),
                     0);
    im_control("{\"http_status\": {\"api\": \"send_group_msg\", \"status\": 429, "
               "\"for_ms\": 1000}}");
    assert_int_equal(tim_send_group_custom(c, "hyapp_g2", "{}", "x", "e-429b", "High",
                                           clock_mono_ms() + 500, &code, err, sizeof(err)),
                     ROOMD_ELIMIT);
    assert_non_null(strstr(err, "http 429"));
    usleep(700 * 1000);
    im_control("{\"fail\": {\"api\": \"send_group_msg\", \"code\": 55555}}");
    assert_int_equal(tim_send_group_custom(c, "hyapp_g2", "{}", "x", "e-unknown", "High",
                                           clock_mono_ms() + 3000, &code, err, sizeof(err)),
                     ROOMD_ERETRY);
    im_control("{\"http_status\": {\"api\": \"send_group_msg\", \"status\": 502}}");
    assert_int_equal(tim_send_group_custom(c, "hyapp_g2", "{}", "x", "e-502", "High",
                                           clock_mono_ms() + 3000, &code, err, sizeof(err)),
                     ROOMD_ERETRY);
    assert_int_equal(code, -1);
    assert_non_null(strstr(err, "http 502"));

    /* A UserSig refusal regenerates the sig and retries once, within the same call. */
    size_t before = im_calls("send_group_msg", -1);
    im_control("{\"fail\": {\"api\": \"send_group_msg\", \"code\": 70052}}");
    assert_int_equal(tim_send_group_custom(c, "hyapp_g2", "{}", "x", "e-resig", "High",
                                           clock_mono_ms() + 3000, &code, err, sizeof(err)),
                     0);
    assert_int_equal(im_calls("send_group_msg", -1), before + 2);

    /* Missing group: permanent 10010. */
    assert_int_equal(tim_send_group_custom(c, "hyapp_nope", "{}", "x", "e-404", "High",
                                           clock_mono_ms() + 3000, &code, err, sizeof(err)),
                     ROOMD_EPERM);
    assert_int_equal(code, 10010);
    /* Destroying it is success-equivalent. */
    assert_int_equal(tim_destroy_group(c, "hyapp_nope", clock_mono_ms() + 3000, err, sizeof(err)),
                     0);
    tim_client_close(c);
}

static void
test_wrong_key(void **state)
{
    struct tim_client *c;
    char err[256];

    (void)state;
    setenv("TIM_TEST_SECRET", "not-the-key", 1);
    c = client("AVChatRoom");
    assert_int_equal(tim_ensure_group(c, "hyapp_wk", "x", clock_mono_ms() + 3000, err, sizeof(err)),
                     ROOMD_ERETRY);
    assert_non_null(strstr(err, "tim 70052"));
    assert_null(strstr(err, "not-the-key"));
    /* The key is rotated where it is read from: the next regeneration picks it up. */
    setenv("TIM_TEST_SECRET", SECRET, 1);
    assert_int_equal(tim_ensure_group(c, "hyapp_wk", "x", clock_mono_ms() + 3000, err, sizeof(err)),
                     0);
    tim_client_close(c);

    /* No key at all: open refuses, naming the config key. */
    struct conf_tencent_im cfg = im_conf("AVChatRoom");
    cfg.secret_key_env = "TIM_TEST_NO_SUCH_VAR";
    assert_int_equal(tim_client_open(&c, &cfg, err, sizeof(err)), ROOMD_EINVAL);
    assert_non_null(strstr(err, "secret_key"));
}

static void
test_timeout_then_dedupe(void **state)
{
    struct tim_client *c = client("AVChatRoom");
    char err[256];
    int64_t t0;
    int code;

    (void)state;
    assert_int_equal(
        tim_ensure_group(c, "hyapp_g3", "g3", clock_mono_ms() + 3000, err, sizeof(err)), 0);
    /* IM stores the message but answers after our timeout (1.5 s). */
    im_control("{\"slow\": {\"api\": \"send_group_msg\", \"ms\": 2500}}");
    t0 = clock_mono_ms();
    assert_int_equal(tim_send_group_custom(c, "hyapp_g3", "{\"event_id\":\"e-slow\"}", "x",
                                           "e-slow", "High", clock_mono_ms() + 5000, &code, err,
                                           sizeof(err)),
                     ROOMD_EUNAVAIL); /* no answer: an outage */
    assert_true(clock_mono_ms() - t0 < 2300);
    assert_non_null(strstr(err, "curl 28"));
    /* The deadline caps the timeout too. */
    im_control("{\"slow\": {\"api\": \"send_group_msg\", \"ms\": 1000}}");
    t0 = clock_mono_ms();
    assert_int_equal(tim_send_group_custom(c, "hyapp_g3", "{\"event_id\":\"e-slow2\"}", "x",
                                           "e-slow2", "High", clock_mono_ms() + 300, &code, err,
                                           sizeof(err)),
                     ROOMD_EUNAVAIL);
    assert_true(clock_mono_ms() - t0 < 800);
    /* The retry is discarded by IM as a duplicate: one stored message. */
    assert_int_equal(tim_send_group_custom(c, "hyapp_g3", "{\"event_id\":\"e-slow\"}", "x",
                                           "e-slow", "High", clock_mono_ms() + 5000, &code, err,
                                           sizeof(err)),
                     0);
    assert_int_equal(im_messages("hyapp_g3", "e-slow\""), 1);
    assert_int_equal(im_calls("send_group_msg", 1), 1);
    tim_client_close(c);
}

static void
test_events_avchatroom(void **state)
{
    struct tim_client *c = client("AVChatRoom");
    Roomd__V1__RoomCreated created = ROOMD__V1__ROOM_CREATED__INIT;
    Roomd__V1__RoomUserJoined joined = ROOMD__V1__ROOM_USER_JOINED__INIT;
    Roomd__V1__RoomUserKicked kicked = ROOMD__V1__ROOM_USER_KICKED__INIT;
    Roomd__V1__RoomClosed closed = ROOMD__V1__ROOM_CLOSED__INIT;
    char err[256];
    json_t *g;

    (void)state;
    created.owner_uid = 7;
    created.title = "live";
    assert_int_equal(deliver(c, "ev-c1", "av1", "RoomCreated", &created.base, err, sizeof(err)), 0);
    assert_int_equal(im_messages("hyapp_av1", "ev-c1"), 1);
    /* The RoomCreated row redelivered: EnsureGroup says exists, message deduplicated. */
    assert_int_equal(deliver(c, "ev-c1", "av1", "RoomCreated", &created.base, err, sizeof(err)), 0);
    assert_int_equal(im_messages("hyapp_av1", "ev-c1"), 1);

    joined.uid = 42;
    assert_int_equal(deliver(c, "ev-j1", "av1", "RoomUserJoined", &joined.base, err, sizeof(err)),
                     0);
    assert_int_equal(im_calls("add_group_member", -1), 0); /* AVChatRoom: SDK joins */

    /* Kick with a ban: the kick message, then ban_group_member. */
    kicked.operator_uid = 7;
    kicked.uid = 42;
    kicked.reason = "spam";
    kicked.ban_until_ms = clock_wall_ms() + 600000;
    assert_int_equal(deliver(c, "ev-k1", "av1", "RoomUserKicked", &kicked.base, err, sizeof(err)),
                     0);
    g = im_group("hyapp_av1");
    assert_non_null(json_object_get(json_object_get(g, "banned"), "42"));
    json_decref(g);
    /* Banning not enabled on this edition: fall back to a mute. */
    im_control("{\"fail\": {\"api\": \"ban_group_member\", \"code\": 10007}}");
    kicked.uid = 43;
    assert_int_equal(deliver(c, "ev-k2", "av1", "RoomUserKicked", &kicked.base, err, sizeof(err)),
                     0);
    g = im_group("hyapp_av1");
    assert_null(json_object_get(json_object_get(g, "banned"), "43"));
    assert_non_null(json_object_get(json_object_get(g, "muted"), "43"));
    json_decref(g);

    closed.operator_uid = 7;
    assert_int_equal(deliver(c, "ev-x1", "av1", "RoomClosed", &closed.base, err, sizeof(err)), 0);
    g = im_group("hyapp_av1");
    assert_null(g);
    /* Redelivered after the group is gone: still delivered. */
    assert_int_equal(deliver(c, "ev-x1", "av1", "RoomClosed", &closed.base, err, sizeof(err)), 0);
    tim_client_close(c);
}

static void
test_events_public(void **state)
{
    struct tim_client *c = client("Public");
    Roomd__V1__RoomUserJoined joined = ROOMD__V1__ROOM_USER_JOINED__INIT;
    Roomd__V1__RoomUserLeft left = ROOMD__V1__ROOM_USER_LEFT__INIT;
    Roomd__V1__RoomGiftSent gift = ROOMD__V1__ROOM_GIFT_SENT__INIT;
    char err[256];
    json_t *g;

    (void)state;
    /* The group is missing (IM was down at CreateRoom): a join creates it first. */
    joined.uid = 5;
    assert_int_equal(deliver(c, "ev-pj", "pub1", "RoomUserJoined", &joined.base, err, sizeof(err)),
                     0);
    g = im_group("hyapp_pub1");
    assert_string_equal(json_string_value(json_object_get(g, "Type")), "Public");
    assert_int_equal(json_array_size(json_object_get(g, "members")), 1);
    json_decref(g);
    /* Joined again (a retry): 'already a member' is fine. */
    assert_int_equal(deliver(c, "ev-pj", "pub1", "RoomUserJoined", &joined.base, err, sizeof(err)),
                     0);
    gift.uid = 5;
    gift.to_uid = 6;
    gift.gift_id = "rose";
    gift.count = 2;
    assert_int_equal(deliver(c, "ev-pg", "pub1", "RoomGiftSent", &gift.base, err, sizeof(err)), 0);
    left.uid = 5;
    left.reason = "leave";
    assert_int_equal(deliver(c, "ev-pl", "pub1", "RoomUserLeft", &left.base, err, sizeof(err)), 0);
    g = im_group("hyapp_pub1");
    assert_int_equal(json_array_size(json_object_get(g, "members")), 0);
    json_decref(g);
    /* A permanent error on the membership call surfaces as EPERM with the code. */
    im_control("{\"fail\": {\"api\": \"add_group_member\", \"code\": 10019}}");
    assert_int_equal(deliver(c, "ev-pj2", "pub1", "RoomUserJoined", &joined.base, err, sizeof(err)),
                     ROOMD_EPERM);
    assert_non_null(strstr(err, "tim 10019"));
    tim_client_close(c);
}

static void
test_c2c_dedupe(void **state)
{
    struct tim_client *c = client("AVChatRoom");
    char err[256];
    json_t *st;

    (void)state;
    for (int i = 0; i < 2; i++)
        assert_int_equal(tim_send_c2c(c, "42", "{\"notice_id\":\"n1\"}", "kicked", "n1", 86400,
                                      clock_mono_ms() + 3000, err, sizeof(err)),
                         0);
    st = im_http("/_state", NULL);
    assert_int_equal(json_array_size(json_object_get(st, "c2c")), 1);
    json_decref(st);
    tim_client_close(c);
}

static void
test_im_down_and_back(void **state)
{
    struct tim_client *c = client("AVChatRoom");
    char err[256];
    int64_t t0;

    (void)state;
    stop(&im_pid);
    t0 = clock_mono_ms();
    assert_int_equal(
        tim_ensure_group(c, "hyapp_down", "d", clock_mono_ms() + 3000, err, sizeof(err)),
        ROOMD_EUNAVAIL);
    assert_true(clock_mono_ms() - t0 < 500); /* connection refused is immediate */
    assert_non_null(strstr(err, "curl 7"));
    im_start();
    assert_int_equal(
        tim_ensure_group(c, "hyapp_down", "d", clock_mono_ms() + 3000, err, sizeof(err)), 0);
    tim_client_close(c);
}

/* ---- activity ------------------------------------------------------------------------- */

static pid_t act_pid;
static int act_port, act_cport;

static void
act_start(void)
{
    char port[16], cport[16], *script = xasprintf("%s/tests/standins/activity_standin.js", src);
    char *proto = xasprintf("%s/proto", src), *rec = xasprintf("%s/activity.jsonl", tmp);
    char *argv[] = {"node", script,     "--port", port, "--control-port", cport, "--proto-dir",
                    proto,  "--record", rec,      NULL};

    snprintf(port, sizeof(port), "%d", act_port);
    snprintf(cport, sizeof(cport), "%d", act_cport);
    act_pid = spawn(argv, "activity-standin.log");
    wait_port(act_port, act_pid);
    wait_port(act_cport, act_pid);
    free(script);
    free(proto);
    free(rec);
}

static void
act_control(const char *path, const char *body)
{
    CURL *h = curl_easy_init();
    char *url = xasprintf("http://127.0.0.1:%d%s", act_cport, path), *buf = NULL;

    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_cleanup(h);
    free(buf);
    free(url);
}

static int
act_publish(struct sink *s, const char *event_id, int64_t timeout_ms, char *err, size_t errlen)
{
    Roomd__V1__RoomGiftSent gift = ROOMD__V1__ROOM_GIFT_SENT__INIT;
    struct outbox_event ev = {0};
    size_t len;
    uint8_t *env;
    int rc;

    gift.uid = 1;
    gift.gift_id = "rose";
    env = envelope(event_id, "act1", event_id[0] ? "RoomGiftSent" : "", &gift.base, &len);
    ev.envelope = env;
    ev.envelope_len = len;
    rc = s->publish(s, &ev, clock_mono_ms() + timeout_ms, err, errlen);
    free(env);
    return rc;
}

static void
test_activity_sink(void **state)
{
    struct conf_activity cfg = {.enabled = true};
    struct sink *s = NULL;
    char target[64], err[256];
    int64_t t0;
    int rc;

    (void)state;
    char *cmd = xasprintf("cd %s/tests/standins && node -e \"require('@grpc/grpc-js')\" "
                          ">/dev/null 2>&1",
                          src);
    int found = system(cmd) == 0;
    free(cmd);
    if (!found)
        th_skip_or_fail("node + @grpc/grpc-js (scripts/deps.sh installs them)");
    act_port = th_free_port();
    act_cport = th_free_port();
    act_start();
    snprintf(target, sizeof(target), "127.0.0.1:%d", act_port);
    cfg.target = target;
    assert_int_equal(sink_activity_open(&s, &cfg, err, sizeof(err)), 0);
    assert_int_equal(s->bit, SINK_BIT_ACTIVITY);

    /* the first call also waits for the channel's first connection */
    if ((rc = act_publish(s, "a-1", 2000, err, sizeof(err))) != 0)
        fprintf(stderr, "first publish: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(act_publish(s, "a-1", 2000, err, sizeof(err)), 0); /* duplicate: OK */
    act_control("/fail", "{\"code\": 6}"); /* ALREADY_EXISTS: delivered */
    assert_int_equal(act_publish(s, "a-2", 2000, err, sizeof(err)), 0);
    act_control("/fail", "{\"code\": 8}"); /* RESOURCE_EXHAUSTED */
    assert_int_equal(act_publish(s, "a-3", 2000, err, sizeof(err)), ROOMD_ERETRY);
    assert_non_null(strstr(err, "RESOURCE_EXHAUSTED"));
    act_control("/fail", "{\"code\": 14}"); /* UNAVAILABLE: an outage */
    assert_int_equal(act_publish(s, "a-3", 2000, err, sizeof(err)), ROOMD_EUNAVAIL);
    /* INVALID_ARGUMENT (here: the stand-in's own validation) is permanent. */
    assert_int_equal(act_publish(s, "", 2000, err, sizeof(err)), ROOMD_EPERM);
    assert_non_null(strstr(err, "INVALID_ARGUMENT"));
    /* Slow past the deadline: DEADLINE_EXCEEDED, an outage, on time. */
    act_control("/slow", "{\"ms\": 1500}");
    t0 = clock_mono_ms();
    assert_int_equal(act_publish(s, "a-4", 300, err, sizeof(err)), ROOMD_EUNAVAIL);
    assert_non_null(strstr(err, "DEADLINE_EXCEEDED"));
    assert_true(clock_mono_ms() - t0 < 1000);

    /* Down: fails fast (no worker held until the deadline), an outage. */
    stop(&act_pid);
    usleep(200000);
    for (int i = 0; i < 3; i++) {
        t0 = clock_mono_ms();
        assert_int_equal(act_publish(s, "a-5", 2000, err, sizeof(err)), ROOMD_EUNAVAIL);
        assert_true(clock_mono_ms() - t0 < 1500);
        fprintf(stderr, "activity down: call %d failed in %lld ms (%s)\n", i,
                (long long)(clock_mono_ms() - t0), err);
    }
    /* Back: the watcher thread reconnects by itself; measure how soon a call works. */
    act_start();
    t0 = clock_mono_ms();
    while (act_publish(s, "a-5", 2000, err, sizeof(err)) != 0) {
        assert_true(clock_mono_ms() - t0 < 3000);
        usleep(20000);
    }
    fprintf(stderr, "activity: first OK %lld ms after the server restarted\n",
            (long long)(clock_mono_ms() - t0));
    s->close(s);
    stop(&act_pid);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ensure_group),      cmocka_unit_test(test_error_classes),
        cmocka_unit_test(test_wrong_key),         cmocka_unit_test(test_timeout_then_dedupe),
        cmocka_unit_test(test_events_avchatroom), cmocka_unit_test(test_events_public),
        cmocka_unit_test(test_c2c_dedupe),        cmocka_unit_test(test_im_down_and_back),
        cmocka_unit_test(test_activity_sink),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
