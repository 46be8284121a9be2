import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.nifi.remote.Transaction;
import org.apache.nifi.remote.TransactionCompletion;
import org.apache.nifi.remote.TransferDirection;
import org.apache.nifi.remote.client.KeystoreType;
import org.apache.nifi.remote.client.SiteToSiteClient;
import org.apache.nifi.remote.protocol.DataPacket;
import org.apache.nifi.remote.protocol.SiteToSiteTransportProtocol;

/**
 * Drives NiFi's own Site-to-Site client (nifi-site-to-site-client, compiled from NiFi's source) against
 * a Site-to-Site server, to check that server (pyspark-s2s's `s2s serve`) against the reference client.
 *
 * Usage: java S2SDriver MODE --url URL --port NAME [options]
 *   MODE      send | receive
 *   --port-id ID               the port's identifier instead of --port (no name lookup by the client)
 *   --transport RAW|HTTP      (default RAW)
 *   --compress                 useCompression(true)
 *   --count N --size BYTES     send: N FlowFiles of BYTES each (content derived from the index)
 *   --batch K                  send: FlowFiles per transaction (default 100)
 *   --expect N                 receive: stop after N FlowFiles (default: until the port is empty)
 *   --require-attr K=V         receive: every FlowFile must carry attribute K with value V
 *   --polls N                  receive: keep polling N transactions even when they bring nothing
 *   --cancel                   receive: read one transaction's FlowFiles, then cancel it (nothing confirmed);
 *                              send: send the first transaction's FlowFiles, then cancel it
 *   --request-batch-count N    requestBatchCount(N) (receive batch hint)
 *   --repeat R --pause-s S     send/receive R times with the same client, S seconds apart (pooled connections)
 *   --manifest FILE            write one line per FlowFile: sha256 size index
 *   --truststore F --keystore F --storepass P   TLS material (PKCS12)
 *   --timeout-s S              client timeout (default 30)
 *
 * Prints one summary line: mode, count, bytes, digest (SHA-256 over the sorted per-FlowFile SHA-256s,
 * so independent of order), and the peers the transactions went to. Exit 0 on success, 2 on error
 * (the exception's class and message are printed).
 */
public final class S2SDriver {

    /**
     * With --expect: empty transactions tolerated before giving up. NiFi's client picks the peer of
     * each RECEIVE at random, weighted by the FlowFile counts of its cached peer list, so in a cluster
     * it keeps asking a drained node for a while.
     */
    private static final int MAX_EMPTY = 50;

    /** An attribute value beyond ASCII (and beyond Latin-1) sent with every FlowFile and checked on receipt. */
    private static final String NOTE = "ünïcödé attribute ✓";

    private S2SDriver() {
    }

    public static void main(final String[] argv) throws Exception {
        if (argv.length < 1) {
            System.err.println("usage: S2SDriver send|receive --url URL --port NAME [options]");
            System.exit(64);
        }
        final String mode = argv[0];
        final Map<String, String> opts = parseOptions(argv);
        try (SiteToSiteClient client = buildClient(opts)) {
            final Summary summary;
            final int repeat = Integer.parseInt(opts.getOrDefault("--repeat", "1"));
            summary = new Summary();
            for (int round = 0; round < repeat; round++) {
                if (round > 0) {
                    Thread.sleep(1000L * Integer.parseInt(opts.getOrDefault("--pause-s", "0")));
                }
                if ("send".equals(mode)) {
                    send(client, opts, summary);
                } else if ("receive".equals(mode)) {
                    receive(client, opts, summary);
                } else {
                    throw new IllegalArgumentException("unknown mode " + mode);
                }
            }
            summary.print(mode, opts.get("--manifest"));
        } catch (final Exception e) {
            System.out.println("ERROR " + e.getClass().getName() + ": " + e.getMessage());
            Throwable cause = e.getCause();
            while (cause != null) {
                System.out.println("  caused by " + cause.getClass().getName() + ": " + cause.getMessage());
                cause = cause.getCause();
            }
            System.exit(2);
        }
    }

    private static Map<String, String> parseOptions(final String[] argv) {
        final Map<String, String> opts = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            final String key = argv[i];
            if (!key.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + key);
            }
            if ("--compress".equals(key) || "--cancel".equals(key)) {
                opts.put(key, "true");
            } else {
                opts.put(key, argv[++i]);
            }
        }
        return opts;
    }

    private static SiteToSiteClient buildClient(final Map<String, String> opts) {
        final SiteToSiteClient.Builder builder = new SiteToSiteClient.Builder()
                .url(require(opts, "--url"))
                .transportProtocol(SiteToSiteTransportProtocol.valueOf(opts.getOrDefault("--transport", "RAW")))
                .useCompression(opts.containsKey("--compress"))
                .timeout(Long.parseLong(opts.getOrDefault("--timeout-s", "30")), TimeUnit.SECONDS);
        if (opts.containsKey("--request-batch-count")) {
            builder.requestBatchCount(Integer.parseInt(opts.get("--request-batch-count")));
        }
        if (opts.containsKey("--port-id")) {
            builder.portIdentifier(opts.get("--port-id"));
        } else {
            builder.portName(require(opts, "--port"));
        }
        if (opts.containsKey("--truststore")) {
            final String pass = require(opts, "--storepass");
            builder.truststoreFilename(opts.get("--truststore")).truststorePass(pass)
                    .truststoreType(KeystoreType.PKCS12);
            if (opts.containsKey("--keystore")) {
                builder.keystoreFilename(opts.get("--keystore")).keystorePass(pass)
                        .keystoreType(KeystoreType.PKCS12);
            }
        }
        return builder.build();
    }

    private static String require(final Map<String, String> opts, final String key) {
        final String value = opts.get(key);
        if (value == null) {
            throw new IllegalArgumentException("missing option " + key);
        }
        return value;
    }

    /** Content of FlowFile i: SHA-256 chained from the index, truncated to size bytes. */
    static byte[] content(final int index, final int size) throws NoSuchAlgorithmException {
        final byte[] out = new byte[size];
        byte[] block = ("flowfile-" + index).getBytes(StandardCharsets.UTF_8);
        final MessageDigest md = MessageDigest.getInstance("SHA-256");
        for (int off = 0; off < size; off += block.length) {
            block = md.digest(block);
            System.arraycopy(block, 0, out, off, Math.min(block.length, size - off));
        }
        return out;
    }

    static String sha256(final byte[] data) throws NoSuchAlgorithmException {
        final StringBuilder hex = new StringBuilder();
        for (final byte b : MessageDigest.getInstance("SHA-256").digest(data)) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }

    private static void send(final SiteToSiteClient client, final Map<String, String> opts, final Summary summary)
            throws Exception {
        final int count = Integer.parseInt(opts.getOrDefault("--count", "10"));
        final int size = Integer.parseInt(opts.getOrDefault("--size", "1024"));
        final int batch = Integer.parseInt(opts.getOrDefault("--batch", "100"));
        int index = 0;
        while (index < count) {
            final Transaction tx = client.createTransaction(TransferDirection.SEND);
            if (tx == null) {
                throw new IOException("createTransaction(SEND) returned null: no peer accepts data");
            }
            final int first = index;
            final int end = Math.min(count, index + batch);
            for (; index < end; index++) {
                final byte[] data = content(index, size);
                final Map<String, String> attrs = new LinkedHashMap<>();
                attrs.put("filename", "java-" + index + ".bin");
                attrs.put("java.index", Integer.toString(index));
                attrs.put("java.sha256", sha256(data));
                attrs.put("java.note", NOTE);
                tx.send(data, attrs);
                summary.add(data, Integer.toString(index));
            }
            if (opts.containsKey("--cancel")) {
                tx.cancel("S2SDriver --cancel");
                summary.peers.merge(tx.getCommunicant().getUrl() + " (cancelled)", end - first, Integer::sum);
                return;
            }
            tx.confirm();
            final TransactionCompletion done = tx.complete();
            summary.peers.merge(tx.getCommunicant().getUrl(), done.getDataPacketsTransferred(), Integer::sum);
        }
    }

    private static void receive(final SiteToSiteClient client, final Map<String, String> opts, final Summary summary)
            throws Exception {
        final int expect = Integer.parseInt(opts.getOrDefault("--expect", "-1"));
        final boolean cancel = opts.containsKey("--cancel");
        final int polls = Integer.parseInt(opts.getOrDefault("--polls", "0"));
        final int start = summary.count;
        int emptyTransactions = 0;
        for (int poll = 1; poll <= polls; poll++) {
            final Transaction tx = client.createTransaction(TransferDirection.RECEIVE);
            if (tx != null) {
                receiveAll(tx, summary, opts);
                tx.confirm();
                summary.peers.merge(tx.getCommunicant().getUrl(), tx.complete().getDataPacketsTransferred(),
                        Integer::sum);
            }
            if (poll % 1000 == 0) {
                System.out.println("polled " + poll + " at " + System.currentTimeMillis() + " ms");
            }
        }
        while (polls == 0 && (expect < 0 || summary.count - start < expect)) {
            final Transaction tx = client.createTransaction(TransferDirection.RECEIVE);
            if (tx == null) {
                if (++emptyTransactions >= MAX_EMPTY || expect < 0) {
                    break;
                }
                Thread.sleep(200);
                continue;
            }
            final int inTx = receiveAll(tx, summary, opts);
            if (cancel) {
                tx.cancel("S2SDriver --cancel");
                summary.peers.merge(tx.getCommunicant().getUrl() + " (cancelled)", inTx, Integer::sum);
                break;
            }
            tx.confirm();
            final TransactionCompletion done = tx.complete();
            summary.peers.merge(tx.getCommunicant().getUrl(), done.getDataPacketsTransferred(), Integer::sum);
            summary.maxPerTransaction = Math.max(summary.maxPerTransaction, inTx);
            if (inTx == 0 && (expect < 0 || ++emptyTransactions >= MAX_EMPTY)) {
                break;
            }
            if (inTx == 0) {
                Thread.sleep(100);
            }
        }
    }

    private static int receiveAll(final Transaction tx, final Summary summary, final Map<String, String> opts)
            throws Exception {
        final String required = opts.get("--require-attr");
        int inTx = 0;
        DataPacket packet;
        while ((packet = tx.receive()) != null) {
            final byte[] data = readAll(packet.getData(), packet.getSize());
            final Map<String, String> attrs = packet.getAttributes();
            if (attrs.containsKey("java.index") && !NOTE.equals(attrs.get("java.note"))) {
                throw new IOException("attribute java.note arrived as " + attrs.get("java.note"));
            }
            if (required != null) {
                final String[] kv = required.split("=", 2);
                if (!kv[1].equals(attrs.get(kv[0]))) {
                    throw new IOException("attribute " + kv[0] + " is " + attrs.get(kv[0]) + ", expected " + kv[1]);
                }
            }
            final String claimed = packet.getAttributes().get("java.sha256");
            final String actual = sha256(data);
            if (claimed != null && !claimed.equals(actual)) {
                throw new IOException("content digest differs from the java.sha256 attribute for "
                        + packet.getAttributes().get("filename"));
            }
            summary.add(data, packet.getAttributes().getOrDefault("java.index",
                    packet.getAttributes().getOrDefault("filename", "?")));
            inTx++;
        }
        return inTx;
    }

    private static byte[] readAll(final InputStream in, final long size) throws IOException {
        final ByteArrayOutputStream out = new ByteArrayOutputStream((int) Math.min(size, 1 << 20));
        in.transferTo(out);
        if (out.size() != size) {
            throw new IOException("DataPacket announced " + size + " bytes but carried " + out.size());
        }
        return out.toByteArray();
    }

    /** Counts, bytes and an order-independent digest of what went through. */
    static final class Summary {
        int count;
        long bytes;
        int maxPerTransaction;
        final List<String> lines = new ArrayList<>();
        final Map<String, Integer> peers = new TreeMap<>();

        void add(final byte[] data, final String label) throws NoSuchAlgorithmException {
            count++;
            bytes += data.length;
            lines.add(sha256(data) + " " + data.length + " " + label);
        }

        void print(final String mode, final String manifest) throws Exception {
            final List<String> digests = new ArrayList<>();
            for (final String line : lines) {
                digests.add(line.substring(0, line.indexOf(' ')));
            }
            Collections.sort(digests);
            final String combined = sha256(String.join("\n", digests).getBytes(StandardCharsets.US_ASCII));
            System.out.println(mode + " count=" + count + " bytes=" + bytes + " digest=" + combined
                    + " maxPerTx=" + maxPerTransaction + " peers=" + peers);
            if (manifest != null) {
                Collections.sort(lines);
                try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Paths.get(manifest)))) {
                    for (final String line : lines) {
                        out.println(line);
                    }
                }
            }
        }
    }
}
