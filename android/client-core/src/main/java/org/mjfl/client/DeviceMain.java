package org.mjfl.client;

import java.io.IOException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import okhttp3.OkHttpClient;
import org.mjfl.client.cache.ArtifactCache;
import org.mjfl.client.net.Backoff;
import org.mjfl.client.net.Tls;
import org.mjfl.client.protocol.Sha256;
import org.mjfl.client.train.StandInTrainer;

/**
 * {@code mjfl-device}: N protocol v1 devices in one JVM, with the stand-in trainer. Runs until
 * Ctrl-C (every device says bye going_away) or until the coordinator says bye going_away/normal
 * to every device, then exits within seconds.
 */
public final class DeviceMain {
    private DeviceMain() {}

    static final String HELP = String.join("\n",
            "usage: mjfl-device --url ws://HOST:PORT (--count N [--id-prefix P] | --id ID) [--token T] [--cache DIR]",
            "                   [--secret S | --key-file F] [--ca PEM | --pin SHA256] [--seed S] [--round-s S] [--verbose]",
            "",
            "Runs N mjfl devices (protocol v1, docs/protocol.md) in one JVM, with ids P-0 .. P-(N-1),",
            "or one device named ID.",
            "",
            "STAND-IN TRAINER: a plain JVM has no ExecuTorch runtime, so these devices do NOT run the",
            "job's program and do NOT learn. Each task walks the shard for the task's epochs (real,",
            "timed work), then returns the global weights times (1 - 1e-4 * lr), samples = shard",
            "size, mean_loss = 0.0. Use them to exercise the wire protocol, scheduling and timing;",
            "the Android app plugs in a real trainer.",
            "",
            "  --url URL        the coordinator, e.g. ws://127.0.0.1:8765 (required)",
            "  --count N        number of devices (required, >= 1)",
            "  --id-prefix P    device id prefix (default jvm-<hostname>)",
            "  --id ID          one device with exactly this id, e.g. standing in for a phone's serial",
            "  --token T        the coordinator's shared lab token (default empty)",
            "  --secret S       the enrolled secret of the one device (--id, or --count 1: P-0)",
            "  --key-file F     enrolled secrets, one 'NAME SECRET' a line (mjfl devices enroll NAME --save F)",
            "  --ca PEM         wss://: trust only these certificates (ca.pem of mjfl certs create)",
            "  --pin SHA256     wss://: trust only the coordinator certificate with this sha256",
            "  --cache DIR      artifact cache; each device keeps DIR/<id>/ (default ~/.cache/mjfl/jvm-devices)",
            "  --seed S         seeds the reconnect jitter (default 0)",
            "  --round-s S      answer each task no sooner than S seconds after it started, like a",
            "                   slower phone (the stand-in itself takes milliseconds; default 0)",
            "  --verbose        log every task and heartbeat",
            "",
            "Devices reconnect with backoff (0.5 s doubling to 30 s, jitter) after a lost connection;",
            "they stop on Ctrl-C, on the coordinator's bye going_away/normal, and on unauthorized or",
            "unsupported_version. Exit status: 0 stopped, 2 bad arguments, 3 refused by the coordinator.");

    public static void main(String[] args) throws Exception {
        Args a;
        try {
            a = Args.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("mjfl-device: " + e.getMessage() + "\n\n" + HELP);
            System.exit(2);
            return;
        }
        if (a.help) {
            System.out.println(HELP);
            return;
        }
        Logs.setUp(a.verbose);
        int status;
        try {
            status = run(a);
        } catch (IllegalArgumentException e) { // e.g. a --ca file that is not PEM
            System.err.println("mjfl-device: " + e.getMessage());
            System.exit(2);
            return;
        }
        if (status >= 0) {
            System.exit(status);
        } // else the JVM is shutting down (Ctrl-C): exit() would block there; the hook finishes the job
    }

    /** Runs the devices; the exit status, or -1 when the JVM is already shutting down. */
    static int run(Args a) throws IOException, InterruptedException {
        ScheduledExecutorService timers = Executors.newScheduledThreadPool(2, r -> {
            Thread t = new Thread(r, "mjfl-timers");
            t.setDaemon(true);
            return t;
        });
        OkHttpClient.Builder builder = new OkHttpClient.Builder()
                .connectTimeout(Duration.ofSeconds(10))
                .readTimeout(Duration.ZERO) // liveness is the protocol's heartbeats (section 10)
                .writeTimeout(Duration.ZERO);
        try {
            if (a.ca != null) {
                try (java.io.InputStream pem = java.nio.file.Files.newInputStream(a.ca)) {
                    Tls.trustPem(builder, pem);
                }
            } else if (a.pin != null) {
                Tls.pinSha256(builder, a.pin);
            }
        } catch (java.security.GeneralSecurityException | IOException e) {
            throw new IllegalArgumentException((a.ca != null ? "--ca " + a.ca : "--pin") + ": " + e.getMessage(), e);
        }
        OkHttpClient http = builder.build();
        // OkHttp 3 and 4 read each WebSocket on a dispatcher thread that counts as a running call.
        http.dispatcher().setMaxRequests(a.count + 16);
        http.dispatcher().setMaxRequestsPerHost(a.count + 16);

        List<Device> devices = new ArrayList<>();
        for (int i = 0; i < a.count; i++) {
            String id = a.id != null ? a.id : a.prefix + "-" + i;
            ArtifactCache cache = new ArtifactCache(a.cache.resolve(dirName(id)));
            devices.add(new Device(DeviceConfig.builder(a.url, id, new StandInTrainer(a.roundS), cache)
                    .token(a.token)
                    .secret(a.secrets.get(id))
                    .facts(new JvmFacts("stand-in")) // no ExecuTorch on a JVM: its results do not learn
                    .backoff(Backoff.defaults(new Random(a.seed * 1_000_003L + i)))
                    .build(), http, timers));
        }
        Logger log = Logger.getLogger("org.mjfl.client");
        String ids = a.id != null ? a.id : a.prefix + "-0.." + (a.count - 1);
        log.info(a.count + " stand-in devices " + ids + " -> " + a.url
                + " (cache " + a.cache + ")");

        List<Thread> threads = new ArrayList<>();
        Device.Stop[] stops = new Device.Stop[a.count];
        for (int i = 0; i < a.count; i++) {
            Device d = devices.get(i);
            int k = i;
            Thread t = new Thread(() -> {
                try {
                    stops[k] = d.run();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } catch (RuntimeException e) {
                    log.log(Level.SEVERE, d.id() + ": stopped by a bug", e);
                }
            }, "mjfl-device-" + d.id());
            threads.add(t);
            t.start();
        }
        Thread hook = new Thread(() -> {
            log.info("stopping: every device says bye going_away");
            devices.forEach(Device::stop);
            joinAll(threads, 5000);
            shutDown(http, timers);
        }, "mjfl-shutdown");
        Runtime.getRuntime().addShutdownHook(hook);

        joinAll(threads, Long.MAX_VALUE);
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException e) {
            return -1; // already shutting down (Ctrl-C)
        }
        shutDown(http, timers);
        boolean refused = false;
        for (int i = 0; i < a.count; i++) {
            log.info(devices.get(i).id() + ": " + stops[i] + "; " + devices.get(i).stats());
            refused |= stops[i] == Device.Stop.REFUSED;
        }
        return refused ? 3 : 0;
    }

    /**
     * OkHttp's dispatcher threads are not daemons and idle for 60 s: without this a JVM whose
     * devices have all stopped would linger a minute.
     */
    static void shutDown(OkHttpClient http, ScheduledExecutorService timers) {
        http.dispatcher().cancelAll();
        http.dispatcher().executorService().shutdown();
        http.connectionPool().evictAll();
        timers.shutdownNow();
        try {
            http.dispatcher().executorService().awaitTermination(2, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void joinAll(List<Thread> threads, long timeoutMs) {
        long deadline = timeoutMs == Long.MAX_VALUE ? Long.MAX_VALUE : System.currentTimeMillis() + timeoutMs;
        for (Thread t : threads) {
            try {
                long left = deadline == Long.MAX_VALUE ? 0 : Math.max(1, deadline - System.currentTimeMillis());
                t.join(left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /** A directory name for an id (ids are any 1 to 256 characters): safe characters, plus a hash if changed. */
    static String dirName(String id) {
        String safe = id.replaceAll("[^A-Za-z0-9._-]", "_").replaceFirst("^\\.", "_"); // no "..", no hidden dirs
        if (safe.equals(id) && safe.length() <= 100) {
            return safe;
        }
        String cut = safe.length() > 80 ? safe.substring(0, 80) : safe;
        return cut + "-" + Sha256.of(id.getBytes(java.nio.charset.StandardCharsets.UTF_8)).substring(0, 12);
    }

    static final class Args {
        String url;
        int count;
        String prefix = "jvm-" + JvmFacts.hostname();
        String id;
        String token = "";
        String secret;
        Path keyFile;
        Path ca;
        String pin;
        java.util.Map<String, String> secrets = new java.util.HashMap<>();
        Path cache = Paths.get(System.getProperty("user.home"), ".cache", "mjfl", "jvm-devices");
        long seed;
        double roundS;
        boolean verbose;
        boolean help;

        static Args parse(String[] argv) {
            Args a = new Args();
            for (int i = 0; i < argv.length; i++) {
                String opt = argv[i];
                if (opt.equals("--help") || opt.equals("-h")) {
                    a.help = true;
                    return a;
                }
                if (opt.equals("--verbose") || opt.equals("-v")) {
                    a.verbose = true;
                    continue;
                }
                String value;
                int eq = opt.indexOf('=');
                if (opt.startsWith("--") && eq > 0) {
                    value = opt.substring(eq + 1);
                    opt = opt.substring(0, eq);
                } else if (i + 1 < argv.length) {
                    value = argv[++i];
                } else {
                    throw new IllegalArgumentException(opt + " needs a value");
                }
                switch (opt) {
                    case "--url":
                        a.url = value;
                        break;
                    case "--count":
                        a.count = parseInt(opt, value);
                        break;
                    case "--id-prefix":
                        a.prefix = value;
                        break;
                    case "--id":
                        a.id = value;
                        break;
                    case "--token":
                        a.token = value;
                        break;
                    case "--secret":
                        a.secret = value;
                        break;
                    case "--key-file":
                        a.keyFile = Paths.get(value);
                        break;
                    case "--ca":
                        a.ca = Paths.get(value);
                        break;
                    case "--pin":
                        a.pin = value;
                        break;
                    case "--cache":
                        a.cache = Paths.get(value);
                        break;
                    case "--seed":
                        a.seed = parseInt(opt, value);
                        break;
                    case "--round-s":
                        try {
                            a.roundS = Double.parseDouble(value);
                        } catch (NumberFormatException e) {
                            throw new IllegalArgumentException("--round-s needs a number of seconds, got " + value);
                        }
                        if (!(a.roundS >= 0) || Double.isInfinite(a.roundS)) {
                            throw new IllegalArgumentException("--round-s must be >= 0, got " + value);
                        }
                        break;
                    default:
                        throw new IllegalArgumentException("unknown option " + opt);
                }
            }
            if (a.url == null || !(a.url.startsWith("ws://") || a.url.startsWith("wss://"))) {
                throw new IllegalArgumentException("--url ws://HOST:PORT is required");
            }
            if (a.id != null) {
                if (a.id.isEmpty() || a.id.length() > 256) {
                    throw new IllegalArgumentException("--id must be 1 to 256 characters");
                }
                if (a.count > 1) {
                    throw new IllegalArgumentException("--id names one device: leave out --count (or give 1)");
                }
                a.count = 1;
            }
            if (a.count < 1) {
                throw new IllegalArgumentException("--count N (>= 1) is required");
            }
            if (a.prefix.isEmpty()) {
                throw new IllegalArgumentException("--id-prefix must not be empty");
            }
            if (a.ca != null && a.pin != null) {
                throw new IllegalArgumentException("--ca and --pin: give one");
            }
            if ((a.ca != null || a.pin != null) && !a.url.startsWith("wss://")) {
                throw new IllegalArgumentException("--ca and --pin go with a wss:// --url");
            }
            if (a.keyFile != null) {
                a.secrets.putAll(readKeyFile(a.keyFile));
            }
            if (a.secret != null) {
                if (a.count != 1) {
                    throw new IllegalArgumentException("--secret is one device's: use it with --id or --count 1");
                }
                a.secrets.put(a.id != null ? a.id : a.prefix + "-0", a.secret);
            }
            return a;
        }

        /** One 'NAME SECRET' a line; blank lines and '#' comments skipped. */
        static java.util.Map<String, String> readKeyFile(Path file) {
            java.util.Map<String, String> out = new java.util.HashMap<>();
            List<String> lines;
            try {
                lines = java.nio.file.Files.readAllLines(file, java.nio.charset.StandardCharsets.UTF_8);
            } catch (IOException e) {
                throw new IllegalArgumentException("--key-file " + file + ": " + e.getMessage());
            }
            for (int i = 0; i < lines.size(); i++) {
                String[] words = lines.get(i).trim().split("\\s+");
                if (words[0].isEmpty() || words[0].startsWith("#")) {
                    continue;
                }
                if (words.length != 2) {
                    throw new IllegalArgumentException("--key-file " + file + ", line " + (i + 1) + ": expected NAME SECRET");
                }
                out.put(words[0], words[1]);
            }
            return out;
        }

        private static int parseInt(String opt, String v) {
            try {
                return Integer.parseInt(v);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(opt + " needs a number, not " + v);
            }
        }
    }
}
