// The lock peer curator: Apache Curator's InterProcessMutex, the canonical ZooKeeper lock
// recipe (what a SpringBoot + Curator service uses), measured as loadtest/peers/README.md
// says. The script `run` beside this file compiles it and passes the arguments through.
//
// How the recipe works (LockInternals.attemptLock in curator-recipes):
// 1. acquire creates an ephemeral sequential node under the lock's path:
//    <path>/_c_<uuid>-lock-<sequence>. The path's children are the queue.
// 2. It lists the children and sorts them by sequence. The lowest holds the lock.
// 3. Otherwise it watches only the node just before its own and waits. When that node
//    goes, it lists again. So a release wakes one waiter, with no polling and no herd.
// 4. release deletes the node.
//
// Limitations: the recipe has no lease. A lock lives as long as the ZooKeeper session
// that made it, so the session timeout plays the contract's 10 s lease.
//
// References: https://curator.apache.org/docs/recipes-shared-reentrant-lock and
// https://zookeeper.apache.org/doc/current/recipes.html#sc_recipes_Locks

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorPeer {
    static final String STRATEGY = "curator InterProcessMutex";
    // The contract's key bench:peer:curator, as a ZooKeeper path.
    static final String ONE_KEY_PATH = "/bench/peer/curator";
    // The keys of their own are siblings of ONE_KEY_PATH, not its children. A lock's queue
    // is every child of its path, so a child that is not a lock node would sit first in
    // that queue forever, and the one-key run would wait behind it.
    static final String EACH_KEY_PARENT = "/bench/peer/curator-each";
    static final String DEFAULT_CONNECT = "127.0.0.1:2181";
    // The session timeout: how long a lock outlives a holder that vanished. The contract's lease.
    static final int SESSION_TIMEOUT_MS = 10_000;
    // How long ZooKeeper has to accept the first connection before we call it down.
    static final int CONNECT_TIMEOUT_MS = 5_000;
    // Curator retries a lost connection 3 times, from 100 ms apart, doubling.
    static final int RETRY_BASE_SLEEP_MS = 100;
    static final int RETRY_COUNT = 3;
    // A pair slower than this counts as an error, so a stuck server cannot hang the run.
    static final long PAIR_TIMEOUT_SECONDS = 10;

    public static void main(String[] args) {
        Options options = Options.parse(args);
        CuratorFramework client = connect(zookeeperAddress());
        try {
            for (int contenders : options.contenders) {
                for (boolean oneKey : new boolean[] {true, false}) {
                    Tally tally = measure(client, contenders, oneKey, options.seconds);
                    say(String.format(Locale.ROOT, "%d contenders, keys \"%s\": %d pairs, median %.3f ms",
                            contenders, keysName(oneKey), tally.pairs.size(), tally.percentileMs(0.5)));
                    System.out.println(tally.json(contenders, oneKey));
                }
            }
            if (System.out.checkError()) {
                die("cannot write to stdout");
            }
        } finally {
            deleteOurPaths(client, options.largestCount());
            client.close();
        }
    }

    /** The command line: --contenders 1,16,64 --seconds 2. */
    static final class Options {
        List<Integer> contenders = List.of(1, 16, 64);
        double seconds = 2;

        static Options parse(String[] args) {
            Options options = new Options();
            for (int i = 0; i < args.length; i += 2) {
                String name = args[i];
                if (!name.equals("--contenders") && !name.equals("--seconds")) {
                    die("unexpected argument '" + name + "': the options are --contenders 1,16,64 --seconds 2");
                }
                if (i + 1 == args.length) {
                    die(name + " needs a value, e.g. --contenders 1,16,64 --seconds 2");
                }
                String value = args[i + 1];
                if (name.equals("--contenders")) {
                    options.contenders = parseContenders(value);
                } else {
                    options.seconds = parseSeconds(value);
                }
            }
            return options;
        }

        int largestCount() {
            return contenders.stream().mapToInt(Integer::intValue).max().orElse(0);
        }
    }

    /** Reads "1,16,64" into counts, each a whole number above zero. */
    static List<Integer> parseContenders(String list) {
        List<Integer> counts = new ArrayList<>();
        for (String field : list.split(",", -1)) {
            try {
                int count = Integer.parseInt(field.trim());
                if (count >= 1) {
                    counts.add(count);
                    continue;
                }
            } catch (NumberFormatException notANumber) {
                // Reported below, with the fix.
            }
            die("bad --contenders '" + list + "': give whole numbers above 0, comma-separated, e.g. --contenders 1,16,64");
        }
        return counts;
    }

    static double parseSeconds(String value) {
        try {
            double seconds = Double.parseDouble(value);
            if (seconds > 0 && !Double.isInfinite(seconds)) {
                return seconds;
            }
        } catch (NumberFormatException notANumber) {
            // Reported below, with the fix.
        }
        die("bad --seconds '" + value + "': give a positive number of seconds, e.g. --seconds 2");
        return 0; // not reached: die exits
    }

    static String zookeeperAddress() {
        String address = System.getenv("SECKILL_ZK_CONNECT");
        return address == null || address.isBlank() ? DEFAULT_CONNECT : address.trim();
    }

    /** The one client every contender shares, as the buyers of one instance share one handle. */
    static CuratorFramework connect(String address) {
        CuratorFramework client;
        try {
            client = CuratorFrameworkFactory.newClient(address, SESSION_TIMEOUT_MS, CONNECT_TIMEOUT_MS,
                    new ExponentialBackoffRetry(RETRY_BASE_SLEEP_MS, RETRY_COUNT));
            client.start();
        } catch (RuntimeException error) {
            die("bad ZooKeeper address '" + address + "' (" + describe(error)
                    + "): set SECKILL_ZK_CONNECT to host:port[,host:port...], e.g. 127.0.0.1:2181");
            return null; // not reached: die exits
        }
        boolean connected;
        try {
            connected = client.blockUntilConnected(CONNECT_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        } catch (InterruptedException interrupted) {
            connected = false;
        }
        if (!connected) {
            client.close();
            die("ZooKeeper at " + address + " did not answer within " + CONNECT_TIMEOUT_MS / 1000
                    + " s: is ZooKeeper up? make services (or set SECKILL_ZK_CONNECT)");
        }
        return client;
    }

    /**
     * Keeps `contenders` threads acquiring and releasing for `seconds`, all on one path or
     * each on its own, and counts the pairs.
     */
    static Tally measure(CuratorFramework client, int contenders, boolean oneKey, double seconds) {
        Tally tally = new Tally();
        long started = System.nanoTime();
        long deadline = started + (long) (seconds * 1e9);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < contenders; i++) {
            // Each thread has its own mutex, as each buyer has its own acquire.
            InterProcessMutex mutex = new InterProcessMutex(client, oneKey ? ONE_KEY_PATH : eachKeyPath(i));
            Thread thread = new Thread(() -> contend(mutex, deadline, tally), "contender-" + i);
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            try {
                thread.join();
            } catch (InterruptedException interrupted) {
                Thread.currentThread().interrupt();
            }
        }
        tally.finish((System.nanoTime() - started) / 1e9);
        return tally;
    }

    static String eachKeyPath(int contender) {
        return EACH_KEY_PARENT + "/" + contender;
    }

    /** Acquires and releases until the deadline; a pair is timed from the acquire's call to the release's answer. */
    static void contend(InterProcessMutex mutex, long deadline, Tally tally) {
        while (System.nanoTime() - deadline < 0) {
            long began = System.nanoTime();
            try {
                if (!mutex.acquire(PAIR_TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
                    tally.fail("acquire: no lock within " + PAIR_TIMEOUT_SECONDS + " s");
                    continue;
                }
            } catch (Exception error) {
                tally.fail("acquire: " + describe(error));
                continue;
            }
            try {
                mutex.release();
                tally.record(System.nanoTime() - began);
            } catch (Exception error) {
                tally.fail("release: " + describe(error));
            }
        }
    }

    /** Every contender's pairs and errors; the first error is the earliest. */
    static final class Tally {
        final List<Long> pairs = new ArrayList<>();
        int errors;
        String firstError;
        double elapsedSeconds;

        synchronized void record(long pairNanos) {
            pairs.add(pairNanos);
        }

        synchronized void fail(String message) {
            errors++;
            if (firstError == null) {
                firstError = message;
            }
        }

        /** Called once every contender has stopped: the percentiles read the pairs sorted. */
        synchronized void finish(double elapsedSeconds) {
            this.elapsedSeconds = elapsedSeconds;
            pairs.sort(null);
        }

        /**
         * The nearest rank, as lockbench's (loadtest/src/latency.rs): the pair of rank
         * ceil(fraction * n), at least 1, of the sorted pairs; 0 when there are none.
         */
        synchronized double percentileMs(double fraction) {
            if (pairs.isEmpty()) {
                return 0;
            }
            int rank = Math.max(1, (int) Math.ceil(fraction * pairs.size()));
            return pairs.get(rank - 1) / 1e6;
        }

        /** One line of the contract, written by hand: the classpath has no JSON library. */
        synchronized String json(int contenders, boolean oneKey) {
            return String.format(Locale.ROOT,
                    "{\"strategy\": %s, \"contenders\": %d, \"keys\": %s, \"pairs\": %d, \"errors\": %d, "
                            + "\"pairs_per_second\": %.1f, \"median_pair_ms\": %.3f, \"p99_pair_ms\": %.3f, "
                            + "\"first_error\": %s}",
                    jsonString(STRATEGY), contenders, jsonString(keysName(oneKey)), pairs.size(), errors,
                    pairs.size() / elapsedSeconds, percentileMs(0.5), percentileMs(0.99),
                    firstError == null ? "null" : jsonString(firstError));
        }
    }

    static String keysName(boolean oneKey) {
        return oneKey ? "one" : "one each";
    }

    /**
     * A JSON string. Quotes, backslashes and control characters are escaped as JSON asks;
     * anything beyond ASCII is too, so the line reads the same whatever Java's output charset.
     */
    static String jsonString(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20 || c > 0x7e) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }

    /**
     * Leaves ZooKeeper as we found it. The recipe deletes its lock nodes but keeps the
     * paths above them, so we delete those, deepest first, each only if it is empty (a path
     * another program still uses keeps its children and stays).
     */
    static void deleteOurPaths(CuratorFramework client, int largestCount) {
        List<String> paths = new ArrayList<>();
        for (int i = 0; i < largestCount; i++) {
            paths.add(eachKeyPath(i));
        }
        paths.addAll(List.of(EACH_KEY_PARENT, ONE_KEY_PATH, "/bench/peer", "/bench"));
        for (String path : paths) {
            try {
                client.delete().forPath(path);
            } catch (Exception notEmptyOrGone) {
                // Someone else's, or already gone: either way not ours to delete.
            }
        }
    }

    static String describe(Throwable error) {
        String message = error.getMessage();
        return message == null ? error.getClass().getSimpleName() : message;
    }

    static void say(String message) {
        System.err.println("[peer curator] " + message);
    }

    /** Stops with a message that names the problem and its fix. */
    static void die(String message) {
        System.err.println("[peer curator] error: " + message);
        System.exit(1);
    }
}
