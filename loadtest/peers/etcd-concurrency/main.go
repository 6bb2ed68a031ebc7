// The lock peer etcd-concurrency: etcd's own lock recipe, the Mutex of clientv3/concurrency,
// measured as loadtest/peers/README.md says. etcd's Lock RPC, which jetcd's lock service
// calls, runs this same Mutex inside the server (etcdserver/api/v3lock/lock.go).
// The script `run` beside this file builds it and passes the arguments through.
//
// Why a waiter can learn late that the lock is free: in Mutex.Lock
// (clientv3/concurrency/mutex.go) a waiter writes its own key, then waitDeletes (key.go)
// reads the newest key created before it and watches that key from the read's revision.
// The server puts a watch that starts at or below its current revision into the
// unsynced group (mvcc/watchable_store.go, watchableStore.watch), and the read's revision
// is never above the current one, so every such watch starts unsynced. Unsynced watches
// hear nothing until syncWatchersLoop (same file) catches them up, every 100 ms: a
// predecessor that releases in that gap is reported at the next round, up to 100 ms late.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
	"go.uber.org/zap"
)

const (
	strategy = "etcd concurrency.Mutex"
	// NewMutex adds "/" and each session's lease ID: bench:peer:etcd-concurrency/<lease>.
	keyPrefix       = "bench:peer:etcd-concurrency"
	defaultEndpoint = "127.0.0.1:2379"
	// The lease of each session, in seconds: the contract's 10 s.
	sessionTTL = 10
	// How long etcd has to answer the first read before we call it down.
	connectTimeout = 3 * time.Second
	// A pair slower than this counts as an error, so a stuck etcd cannot hang the run.
	pairTimeout = 10 * time.Second
)

// Run is one line on stdout, with the contract's fields.
type Run struct {
	Strategy       string  `json:"strategy"`
	Contenders     int     `json:"contenders"`
	Keys           string  `json:"keys"`
	Pairs          int     `json:"pairs"`
	Errors         int     `json:"errors"`
	PairsPerSecond float64 `json:"pairs_per_second"`
	MedianPairMs   float64 `json:"median_pair_ms"`
	P99PairMs      float64 `json:"p99_pair_ms"`
	FirstError     *string `json:"first_error"`
}

func main() {
	contendersFlag := flag.String("contenders", "1,16,64", "contender counts, comma-separated")
	seconds := flag.Float64("seconds", 2, "how long each run lasts, in seconds")
	flag.Parse()
	counts, err := parseContenders(*contendersFlag)
	if err != nil {
		die(err.Error())
	}
	if !(*seconds > 0) || math.IsInf(*seconds, 0) {
		die(fmt.Sprintf("bad --seconds %v: give a positive number of seconds, e.g. --seconds 2", *seconds))
	}
	if flag.NArg() > 0 {
		die(fmt.Sprintf("unexpected argument %q: the options are --contenders 1,16,64 --seconds 2", flag.Arg(0)))
	}
	length := time.Duration(*seconds * float64(time.Second))

	endpoints := etcdEndpoints()
	client, err := connect(endpoints)
	if err != nil {
		die(fmt.Sprintf("etcd at %s did not answer (%v): is etcd up? make services (or set SECKILL_ETCD_ENDPOINTS)",
			strings.Join(endpoints, ","), err))
	}
	defer client.Close()

	out := json.NewEncoder(os.Stdout)
	for _, contenders := range counts {
		for _, oneKey := range []bool{true, false} {
			run, err := measure(client, contenders, oneKey, length)
			if err != nil {
				die(fmt.Sprintf("could not open %d sessions (%v): is etcd up? make services", contenders, err))
			}
			say(fmt.Sprintf("%d contenders, keys %q: %d pairs, median %.3f ms",
				contenders, run.Keys, run.Pairs, run.MedianPairMs))
			if err := out.Encode(run); err != nil {
				die(fmt.Sprintf("cannot write to stdout: %v", err))
			}
		}
	}
}

// parseContenders reads "1,16,64" into counts, each a whole number above zero.
func parseContenders(list string) ([]int, error) {
	var counts []int
	for _, field := range strings.Split(list, ",") {
		count, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || count < 1 {
			return nil, fmt.Errorf("bad --contenders %q: give whole numbers above 0, comma-separated, e.g. --contenders 1,16,64", list)
		}
		counts = append(counts, count)
	}
	return counts, nil
}

// etcdEndpoints reads SECKILL_ETCD_ENDPOINTS; the client wants host:port, without http://.
func etcdEndpoints() []string {
	var endpoints []string
	for _, endpoint := range strings.Split(os.Getenv("SECKILL_ETCD_ENDPOINTS"), ",") {
		endpoint = strings.TrimPrefix(strings.TrimSpace(endpoint), "http://")
		if endpoint != "" {
			endpoints = append(endpoints, endpoint)
		}
	}
	if len(endpoints) == 0 {
		return []string{defaultEndpoint}
	}
	return endpoints
}

// connect makes the one client every contender shares, and checks that etcd answers.
func connect(endpoints []string) (*clientv3.Client, error) {
	// The client logs at info level to stderr by default; errors are enough here.
	logs := zap.NewProductionConfig()
	logs.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: connectTimeout, LogConfig: &logs})
	if err != nil {
		return nil, err
	}
	// New does not wait for a connection, so one read proves that etcd is there.
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if _, err := client.Get(ctx, keyPrefix, clientv3.WithCountOnly()); err != nil {
		client.Close()
		return nil, err
	}
	return client, nil
}

// measure keeps `contenders` goroutines acquiring and releasing for `length`, all on one
// key or each on its own, and counts the pairs.
func measure(client *clientv3.Client, contenders int, oneKey bool, length time.Duration) (Run, error) {
	// Each contender needs a session of its own. A Mutex's key is <prefix>/<lease ID>, so
	// two mutexes on one session with one prefix would share a key: each would take the
	// other's key for its own (Lock's Else branch) and both would hold the lock at once.
	// The sessions are opened before the clock starts and closed after it stops.
	sessions, err := openSessions(client, contenders)
	if err != nil {
		return Run{}, err
	}
	defer closeSessions(sessions)

	var results tally
	var contending sync.WaitGroup
	started := time.Now()
	deadline := started.Add(length)
	for i, session := range sessions {
		prefix := keyPrefix
		if !oneKey {
			prefix = fmt.Sprintf("%s:%d", keyPrefix, i)
		}
		contending.Add(1)
		go func(mutex *concurrency.Mutex) {
			defer contending.Done()
			contend(mutex, deadline, &results)
		}(concurrency.NewMutex(session, prefix))
	}
	contending.Wait()
	return results.run(contenders, oneKey, time.Since(started)), nil
}

func openSessions(client *clientv3.Client, count int) ([]*concurrency.Session, error) {
	var sessions []*concurrency.Session
	for len(sessions) < count {
		session, err := concurrency.NewSession(client, concurrency.WithTTL(sessionTTL))
		if err != nil {
			closeSessions(sessions)
			return nil, err
		}
		sessions = append(sessions, session)
	}
	return sessions, nil
}

// closeSessions revokes each lease, which deletes any key left under it.
func closeSessions(sessions []*concurrency.Session) {
	for _, session := range sessions {
		session.Close()
	}
}

// contend acquires and releases until the deadline; a pair is timed from the acquire's
// call to the release's answer.
func contend(mutex *concurrency.Mutex, deadline time.Time, results *tally) {
	for time.Now().Before(deadline) {
		began := time.Now()
		if err := pair(mutex); err != nil {
			results.fail(err)
		} else {
			results.record(time.Since(began))
		}
	}
}

func pair(mutex *concurrency.Mutex) error {
	ctx, cancel := context.WithTimeout(context.Background(), pairTimeout)
	defer cancel()
	if err := mutex.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := mutex.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// tally collects every contender's pairs and errors; the first error is the earliest.
type tally struct {
	mu         sync.Mutex
	pairs      []time.Duration
	errors     int
	firstError *string
}

func (t *tally) record(pair time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pairs = append(t.pairs, pair)
}

func (t *tally) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errors++
	if t.firstError == nil {
		message := err.Error()
		t.firstError = &message
	}
}

func (t *tally) run(contenders int, oneKey bool, elapsed time.Duration) Run {
	sort.Slice(t.pairs, func(i, j int) bool { return t.pairs[i] < t.pairs[j] })
	keys := "one each"
	if oneKey {
		keys = "one"
	}
	return Run{
		Strategy:       strategy,
		Contenders:     contenders,
		Keys:           keys,
		Pairs:          len(t.pairs),
		Errors:         t.errors,
		PairsPerSecond: round(float64(len(t.pairs))/elapsed.Seconds(), 1),
		MedianPairMs:   percentileMs(t.pairs, 0.5),
		P99PairMs:      percentileMs(t.pairs, 0.99),
		FirstError:     t.firstError,
	}
}

// percentileMs is the nearest rank, as lockbench's (loadtest/src/latency.rs): the pair of
// rank ceil(fraction * n), at least 1, of the sorted pairs; 0 when there are none.
func percentileMs(sorted []time.Duration, fraction float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(fraction * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	return round(float64(sorted[rank-1])/float64(time.Millisecond), 3)
}

func round(value float64, places int) float64 {
	scale := math.Pow(10, float64(places))
	return math.Round(value*scale) / scale
}

func say(message string) {
	fmt.Fprintf(os.Stderr, "[peer etcd-concurrency] %s\n", message)
}

// die stops with a message that names the problem and its fix.
func die(message string) {
	fmt.Fprintf(os.Stderr, "[peer etcd-concurrency] error: %s\n", message)
	os.Exit(1)
}
