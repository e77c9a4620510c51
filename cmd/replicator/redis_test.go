package main

import (
	"math/rand/v2"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testsupport/freeport"
	"github.com/specstar/replicator/internal/testsupport/redistest"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/internal/testsupport/testsize"
)

// redisMeta is a Redis meta store URL under a fresh key prefix.
func redisMeta(t *testing.T) string {
	t.Helper()
	return redistest.SinkURL("prefix=" + url.QueryEscape(redistest.Prefix(t)+"{model}:"))
}

// TestRedisCrashAndResume kills a replicator writing a deployment with
// its metas in Redis and its revisions and blobs on disk (SIGKILL at
// random points of the drain), restarts it each time, and checks that
// the deployment then verifies equal to the archive, as a clean run's.
func TestRedisCrashAndResume(t *testing.T) {
	t.Parallel() // seconds of waiting on processes: overlaps the package's other slow tests
	bin := buildReplicator(t)
	archive := filepath.Join(t.TempDir(), "crash.acbak")
	if err := writeArchive(archive, testsize.Of(120, 1500)); err != nil {
		t.Fatal(err)
	}
	bus := testBus(t)
	replay(t, bus, archive)
	meta, root := redisMeta(t), "disk:"+filepath.Join(t.TempDir(), "crashed")+"?sync=batch"
	dep := []string{"--meta", meta + "&name=crashy", "--resources", root, "--blobs", root}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills, wantKills := 0, testsize.Of(2, 4)
	for i := 0; i < wantKills+2 && kills < wantKills; i++ {
		cmd := exec.Command(bin, append([]string{"run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--batch", "64", "--ack-wait", "3s"}, dep...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if killPartway(t, bus, cmd, rng) {
			kills++
		}
	}
	if kills == 0 {
		t.Fatal("the replicator always finished before it could be killed; enlarge the archive")
	}
	if code, out, errs := runCmd(t, append([]string{"run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--ack-wait", "3s"}, dep...)...); code != exitOK {
		t.Fatalf("final run: %d\n%s%s", code, out, errs)
	}
	code, out, errs := runCmd(t, append([]string{"verify", "--from", archive}, dep...)...)
	if code != exitOK || !regexp.MustCompile(`equal: [1-9][0-9]* metas`).MatchString(out) {
		t.Fatalf("verify after %d kills: exit %d\n%s%s", kills, code, out, errs)
	}
	t.Logf("killed %d times; %s", kills, strings.TrimSpace(out))
}

// TestRedisSecretsNeverShow: the password of a redis:// URL shows neither
// in what run, status and verify print nor in the stream's consumers.
// The test server's default user has no password, so it accepts any.
func TestRedisSecretsNeverShow(t *testing.T) {
	const secret = "Sekr1tPw"
	u, err := url.Parse(redisMeta(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("", secret)
	meta := u.String()
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	var all string
	for _, args := range [][]string{
		{"run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", meta},
		{"status", "--nats", bus.URL()},
		{"status", "--nats", bus.URL(), "--json"},
		{"verify", "--from", testfixtures.Path(t, "small.acbak"), "--sink", meta},
		{"verify", "--from", testfixtures.Path(t, "small.acbak"), "--sink", strings.Replace(meta, "redis://", "redis://%zz", 1)},
	} {
		code, out, errs := runCmdWithin(t, 30*time.Second, args...)
		if args[0] == "run" && code != exitOK {
			t.Fatalf("run: %d %s %s", code, out, errs)
		}
		all += out + errs
	}
	for ci := range bus.Stream.ListConsumers(t.Context()).Info() {
		all += ci.Config.Description + ci.Name
	}
	if strings.Contains(all, secret) {
		t.Fatalf("the password shows:\n%s", all)
	}
}

// TestRedisDialFailureSaysItOnce: a Redis sink that cannot be reached is
// one error from the command, not also go-redis's own lines in a format
// of their own on the process's stderr (its pool logs every failed dial
// through a package-level logger, which the commands route to their
// debug log).
func TestRedisDialFailureSaysItOnce(t *testing.T) {
	bin := buildReplicator(t)
	closed := "redis://" + freeport.Addr(t) + "/0"
	var stderr strings.Builder
	cmd := exec.Command(bin, "verify", "--from", testfixtures.Path(t, "small.acbak"), "--to", closed)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("verify against a Redis that is not there succeeded")
	}
	if !strings.Contains(stderr.String(), "connection refused") {
		t.Fatalf("the error does not say why:\n%s", stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.HasPrefix(line, "replicator verify: ") {
			t.Errorf("a line that is not the command's: %q", line)
		}
	}
}

// TestRedisForeignKeyDeadLetters: a hash where one resource's meta key
// would be (another program's key) is a permanent refusal of that meta
// (issue 26, item 5: the sink retried WRONGTYPE forever, blocking every
// model): run drains with the one meta dead-lettered, saying why, the
// hash left alone, and every other meta written.
func TestRedisForeignKeyDeadLetters(t *testing.T) {
	ctx := t.Context()
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	meta := redistest.SinkURL("prefix="+url.QueryEscape(prefix+"{model}:")) + "&name=foreign"
	foreign := prefix + "issue:resource_meta:issue:a9eec085-e690-4d78-a981-adae828114ab" // one of small.acbak's
	if err := c.HSet(ctx, foreign, "owner", "someone else").Err(); err != nil {
		t.Fatal(err)
	}
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	code, out, errs := runCmdWithin(t, time.Minute, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", meta)
	if code != exitOK || !strings.Contains(out, " 1 dead-lettered") {
		t.Fatalf("run --until-drained: exit %d, want the one meta at the foreign key dead-lettered\n%s%s", code, out, errs)
	}
	if typ, err := c.Type(ctx, foreign).Result(); err != nil || typ != "hash" {
		t.Errorf("the foreign key is now a %q (%v); want the hash left alone", typ, err)
	}
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	strs := 0
	for _, k := range keys {
		if typ, _ := c.Type(ctx, k).Result(); typ == "string" {
			strs++
		}
	}
	if strs != 5 {
		t.Errorf("%d metas written (%v); want small.acbak's 6 but the foreign one", strs, keys)
	}
	code, list, errs := runCmd(t, "dlq", "list", "--nats", bus.URL(), "--sink", "foreign")
	if code != exitOK || !strings.Contains(list, "1 dead letters") || !strings.Contains(list, "WRONGTYPE") || !strings.Contains(list, "subject=specstar.issue.meta") {
		t.Errorf("dlq list: exit %d, want one issue meta refused for WRONGTYPE\n%s%s", code, list, errs)
	}
}
