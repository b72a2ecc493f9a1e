package tonyworkflow.minicluster;

import java.io.File;
import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CommonConfigurationKeysPublic;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.net.NetUtils;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.webapp.util.WebAppUtils;

import sun.misc.Signal;

/**
 * Runs one MiniDFSCluster and one MiniYARNCluster in this JVM until it is terminated.
 *
 * <p>Every setting comes from the *-site.xml files that the Python launcher puts first on the
 * classpath (YARN's addresses included), so this class only owns what cannot be known in advance:
 * the ports the daemons bound when asked for port 0. Those are written to
 * {@code <state dir>/run/addresses.json} once both clusters accept work; the launcher turns them
 * into a client configuration.
 *
 * <p>Usage: {@code MiniClusterMain STATE_DIR NODEMANAGERS NAMENODE_PORT NAMENODE_HTTP_PORT}
 * (a port of 0 means any free one).
 */
public final class MiniClusterMain {

  private MiniClusterMain() {
  }

  private static MiniDFSCluster dfs;
  private static MiniYARNCluster yarn;

  public static void main(String[] args) {
    if (args.length != 4) {
      System.err.println("usage: MiniClusterMain STATE_DIR NODEMANAGERS NAMENODE_PORT NAMENODE_HTTP_PORT");
      System.exit(2);
    }
    // Stopping from a JVM shutdown hook makes Hadoop's own hook bookkeeping throw, so TERM and
    // INT only wake the main thread, which stops the daemons in order and then exits.
    CountDownLatch stopRequested = new CountDownLatch(1);
    Signal.handle(new Signal("TERM"), sig -> stopRequested.countDown());
    Signal.handle(new Signal("INT"), sig -> stopRequested.countDown());

    int status = 0;
    try {
      start(new File(args[0]).getAbsoluteFile(), Integer.parseInt(args[1]), Integer.parseInt(args[2]),
          Integer.parseInt(args[3]));
      System.out.println("tony-minicluster: ready");
      System.out.flush();
      stopRequested.await();
      System.out.println("tony-minicluster: stopping");
    } catch (Throwable t) {
      System.err.println("tony-minicluster: failed to start");
      t.printStackTrace();
      status = 1;
    } finally {
      stop();
    }
    // Hadoop leaves non-daemon threads behind, and the launcher waits for this process to end.
    System.exit(status);
  }

  private static void start(File stateDir, int nodeManagers, int nameNodePort, int nameNodeHttpPort)
      throws Exception {
    Configuration conf = new YarnConfiguration(new HdfsConfiguration());
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(stateDir, "hdfs").getPath());
    dfs = new MiniDFSCluster.Builder(conf)
        .numDataNodes(1)
        .nameNodePort(nameNodePort)
        .nameNodeHttpPort(nameNodeHttpPort)
        .format(true)
        // That check fails a unit test whose daemons called System.exit; here it would only
        // turn a daemon's fatal error into a second one at shutdown.
        .checkExitOnShutdown(false)
        .build();
    dfs.waitActive();
    // The YARN daemons and the containers must agree with clients on the default filesystem.
    conf.set(CommonConfigurationKeysPublic.FS_DEFAULT_NAME_KEY, dfs.getURI().toString());

    yarn = new MiniYARNCluster("tony", 1, nodeManagers, 1, 1);
    yarn.init(conf);
    yarn.start();
    if (!yarn.waitForNodeManagersToConnect(60_000)) {
      throw new IOException("the NodeManagers did not register with the ResourceManager within 60 s");
    }

    Configuration rm = yarn.getResourceManager().getConfig();
    Map<String, String> addresses = new LinkedHashMap<>();
    addresses.put("fs_default", dfs.getURI().toString());
    addresses.put("namenode_http", NetUtils.getHostPortString(dfs.getNameNode().getHttpAddress()));
    addresses.put("rm_address", rm.get(YarnConfiguration.RM_ADDRESS));
    addresses.put("rm_scheduler_address", rm.get(YarnConfiguration.RM_SCHEDULER_ADDRESS));
    addresses.put("rm_resource_tracker_address", rm.get(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS));
    addresses.put("rm_admin_address", rm.get(YarnConfiguration.RM_ADMIN_ADDRESS));
    addresses.put("rm_webapp_address", WebAppUtils.getRMWebAppURLWithoutScheme(rm));
    writeJson(new File(stateDir, "run/addresses.json").toPath(), addresses);
  }

  /**
   * Stops YARN before HDFS: NodeManagers may still be writing to HDFS. Whatever one of them
   * throws, the other must still stop and the JVM must still exit.
   */
  private static void stop() {
    try {
      if (yarn != null) {
        yarn.stop();
      }
    } catch (Throwable t) {
      t.printStackTrace();
    }
    try {
      if (dfs != null) {
        dfs.shutdown();
      }
    } catch (Throwable t) {
      t.printStackTrace();
    }
  }

  /** Writes a flat string map as JSON, via a rename so the launcher never reads half a file. */
  private static void writeJson(Path target, Map<String, String> values) throws IOException {
    Files.createDirectories(target.getParent());
    Path part = target.resolveSibling(target.getFileName() + ".part");
    try (Writer w = Files.newBufferedWriter(part, StandardCharsets.UTF_8)) {
      StringBuilder sb = new StringBuilder("{");
      for (Map.Entry<String, String> e : values.entrySet()) {
        if (sb.length() > 1) {
          sb.append(", ");
        }
        sb.append(quote(e.getKey())).append(": ").append(quote(e.getValue()));
      }
      w.write(sb.append("}\n").toString());
    }
    Files.move(part, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  private static String quote(String s) {
    if (s == null) {
      return "null";
    }
    StringBuilder sb = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        sb.append('\\').append(c);
      } else if (c < 0x20) {
        sb.append(String.format("\\u%04x", (int) c));
      } else {
        sb.append(c);
      }
    }
    return sb.append('"').toString();
  }
}
