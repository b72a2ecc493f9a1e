package tonyworkflow.minicluster;

import java.io.File;
import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CommonConfigurationKeysPublic;
import org.apache.hadoop.hdfs.DFSConfigKeys;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.net.NetUtils;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.NodeLabel;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;
import org.apache.hadoop.yarn.server.resourcemanager.nodelabels.RMNodeLabelsManager;
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
 * <p>A secure cluster also runs a KDC (Hadoop's MiniKdc) in this JVM, started before anything
 * else so that the daemons' Kerberos logins find it. It writes {@code <state dir>/kerberos/krb5.conf}
 * for this JVM and for clients, and the keytabs the launcher asks for; the site files already name
 * those keytabs and principals. The realm and the KDC's port join the addresses.
 *
 * <p>Two things can be asked of a running cluster besides stopping it, both set up here because
 * only this JVM holds the daemons. The setting {@code tony.minicluster.node-labels}
 * ({@code LABEL=INDEX[,LABEL=INDEX...]}) gives NodeManager INDEX the exclusive node label LABEL once
 * the NodeManagers have registered. And one NodeManager can be stopped as if its machine had died
 * (see {@link #serveControlRequests}), so that the ResourceManager loses it. The NodeManagers'
 * addresses join the addresses, as {@code nodemanager.INDEX.node_id} and
 * {@code nodemanager.INDEX.http_address}.
 *
 * <p>Usage: {@code MiniClusterMain STATE_DIR NODEMANAGERS NAMENODE_PORT NAMENODE_HTTP_PORT
 * [REALM KEYTAB=PRINCIPAL[,PRINCIPAL...]...]} (a port of 0 means any free one; a realm makes the
 * cluster secure, and each KEYTAB is written with the keys of its principals, named without the
 * realm).
 */
public final class MiniClusterMain {

  private MiniClusterMain() {
  }

  private static MiniKdc kdc;
  private static MiniDFSCluster dfs;
  /** Each DataNode's data transfer address, in the order they started (their numbers). */
  private static final List<String> dataNodeNames = new ArrayList<>();
  private static MiniYARNCluster yarn;
  private static int nodeManagerCount;

  /** Where the launcher asks for a NodeManager to stop, relative to the state directory. */
  private static final String CONTROL_DIR = "run/control";
  private static final String STOP_NODEMANAGER = "stop-nodemanager-";
  private static final String STOP_DATANODE = "stop-datanode-";
  private static final String DATANODES_KEY = "tony.minicluster.datanodes";
  private static final String NODE_LABELS_KEY = "tony.minicluster.node-labels";
  private static final String DISTINCT_HOSTS_KEY = "tony.minicluster.distinct-hosts";

  public static void main(String[] args) {
    if (args.length < 4 || args.length == 5) {
      System.err.println("usage: MiniClusterMain STATE_DIR NODEMANAGERS NAMENODE_PORT NAMENODE_HTTP_PORT "
          + "[REALM KEYTAB=PRINCIPAL[,PRINCIPAL...]...]");
      System.exit(2);
    }
    // Stopping from a JVM shutdown hook makes Hadoop's own hook bookkeeping throw, so TERM and
    // INT only wake the main thread, which stops the daemons in order and then exits.
    CountDownLatch stopRequested = new CountDownLatch(1);
    Signal.handle(new Signal("TERM"), sig -> stopRequested.countDown());
    Signal.handle(new Signal("INT"), sig -> stopRequested.countDown());

    int status = 0;
    try {
      File stateDir = new File(args[0]).getAbsoluteFile();
      Map<String, String> addresses = new LinkedHashMap<>();
      if (args.length > 4) {
        startKdc(stateDir, args[4], Arrays.asList(args).subList(5, args.length), addresses);
      }
      start(stateDir, Integer.parseInt(args[1]), Integer.parseInt(args[2]), Integer.parseInt(args[3]), addresses);
      System.out.println("tony-minicluster: ready");
      System.out.flush();
      Thread control = new Thread(() -> serveControlRequests(stateDir), "tony-minicluster-control");
      control.setDaemon(true);
      control.start();
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

  /**
   * Starts the KDC and writes the krb5.conf and the keytabs. The realm is given whole; MiniKdc
   * builds it from an organisation name and domain, so it is split at its first dot.
   */
  private static void startKdc(File stateDir, String realm, List<String> keytabs, Map<String, String> addresses)
      throws Exception {
    int dot = realm.indexOf('.');
    if (dot <= 0 || dot == realm.length() - 1) {
      throw new IllegalArgumentException("a realm must have a dot inside it, like EXAMPLE.COM: " + realm);
    }
    File krbDir = new File(stateDir, "kerberos");
    Properties kdcConf = MiniKdc.createConf();
    kdcConf.setProperty(MiniKdc.ORG_NAME, realm.substring(0, dot));
    kdcConf.setProperty(MiniKdc.ORG_DOMAIN, realm.substring(dot + 1));
    kdc = new MiniKdc(kdcConf, new File(krbDir, "kdc"));
    kdc.start();
    if (!kdc.getRealm().equals(realm)) {
      throw new IllegalStateException("the KDC serves " + kdc.getRealm() + ", not " + realm);
    }
    String kdcAddress = kdc.getHost() + ":" + kdc.getPort();

    // MiniKdc's own krb5.conf lets the client library turn "localhost" into whatever the resolver
    // calls it and look the realm up in DNS; this one keeps every name as written, so that
    // HTTP/localhost and hadoop/localhost are the principals asked for, by Java and MIT alike.
    File krb5Conf = new File(krbDir, "krb5.conf");
    String text = String.join("\n",
        "# The mini cluster's KDC, for Java (-Djava.security.krb5.conf) and MIT Kerberos (KRB5_CONFIG).",
        "[libdefaults]",
        "    default_realm = " + realm,
        "    dns_lookup_realm = false",
        "    dns_lookup_kdc = false",
        "    dns_canonicalize_hostname = false",
        "    rdns = false",
        "    forwardable = true",
        "    # The KDC listens on TCP only.",
        "    udp_preference_limit = 1",
        "",
        "[realms]",
        "    " + realm + " = {",
        "        kdc = " + kdcAddress,
        "    }",
        "",
        "[domain_realm]",
        "    localhost = " + realm,
        "");
    writeAtomically(krb5Conf.toPath(), text);
    // Java reads its Kerberos settings once, on first use, which is still to come: from here on
    // every login in this JVM sees this file.
    System.setProperty(MiniKdc.JAVA_SECURITY_KRB5_CONF, krb5Conf.getPath());

    for (String spec : keytabs) {
      int eq = spec.indexOf('=');
      if (eq <= 0) {
        throw new IllegalArgumentException("a keytab is given as KEYTAB=PRINCIPAL[,PRINCIPAL...], not " + spec);
      }
      File keytab = new File(spec.substring(0, eq)).getAbsoluteFile();
      kdc.createPrincipal(keytab, spec.substring(eq + 1).split(","));
    }
    addresses.put("realm", realm);
    addresses.put("kdc", kdcAddress);
  }

  private static void start(File stateDir, int nodeManagers, int nameNodePort, int nameNodeHttpPort,
      Map<String, String> addresses) throws Exception {
    Configuration conf = new YarnConfiguration(new HdfsConfiguration());
    if (kdc != null) {
      // A process has one Kerberos login, which every daemon in it serves as (MiniYARNCluster's
      // ResourceManager and NodeManagers do not log in at all), so the site files give every
      // daemon the same principal and this logs the JVM in as it before any daemon starts.
      UserGroupInformation.setConfiguration(conf);
      UserGroupInformation.loginUserFromKeytab(conf.get(DFSConfigKeys.DFS_NAMENODE_KERBEROS_PRINCIPAL_KEY),
          conf.get(DFSConfigKeys.DFS_NAMENODE_KEYTAB_FILE_KEY));
    }
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(stateDir, "hdfs").getPath());
    int dataNodes = conf.getInt(DATANODES_KEY, 1);
    dfs = new MiniDFSCluster.Builder(conf)
        .numDataNodes(dataNodes)
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

    nodeManagerCount = nodeManagers;
    yarn = new MiniYARNCluster("tony", 1, nodeManagers, 1, 1);
    yarn.init(conf);
    if (conf.getBoolean(DISTINCT_HOSTS_KEY, false)) {
      giveNodeManagersHostsOfTheirOwn(nodeManagers);
    }
    yarn.start();
    if (!yarn.waitForNodeManagersToConnect(60_000)) {
      throw new IOException("the NodeManagers did not register with the ResourceManager within 60 s");
    }
    labelNodes(conf.get(NODE_LABELS_KEY, ""), nodeManagers);

    Configuration rm = yarn.getResourceManager().getConfig();
    // The web app binds a free port after the applications' configuration was taken: tracking
    // URLs would name the proxy at port 0. The proxy is the web app's own.
    String web = WebAppUtils.getRMWebAppURLWithoutScheme(rm);
    rm.set(YarnConfiguration.PROXY_ADDRESS, web);
    yarn.getResourceManager().getRMContext().getYarnConfiguration().set(YarnConfiguration.PROXY_ADDRESS, web);
    // ...and the ResourceManager's context keeps the address it read first.
    try {
      java.lang.reflect.Field kept = yarn.getResourceManager().getRMContext().getClass()
          .getDeclaredField("proxyHostAndPort");
      kept.setAccessible(true);
      kept.set(yarn.getResourceManager().getRMContext(), web);
    } catch (ReflectiveOperationException e) {
      System.err.println("the ResourceManager's proxy address stays as it was: " + e);
    }
    addresses.put("fs_default", dfs.getURI().toString());
    addresses.put("namenode_http", NetUtils.getHostPortString(dfs.getNameNode().getHttpAddress()));
    addresses.put("rm_address", rm.get(YarnConfiguration.RM_ADDRESS));
    addresses.put("rm_scheduler_address", rm.get(YarnConfiguration.RM_SCHEDULER_ADDRESS));
    addresses.put("rm_resource_tracker_address", rm.get(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS));
    addresses.put("rm_admin_address", rm.get(YarnConfiguration.RM_ADMIN_ADDRESS));
    addresses.put("rm_webapp_address", WebAppUtils.getRMWebAppURLWithoutScheme(rm));
    for (int i = 0; i < dataNodes; i++) {
      DataNode dn = dfs.getDataNodes().get(i);
      dataNodeNames.add(NetUtils.getHostPortString(dn.getXferAddress()));
      addresses.put("datanode." + i + ".xfer_address", NetUtils.getHostPortString(dn.getXferAddress()));
      addresses.put("datanode." + i + ".http_address", "127.0.0.1:" + dn.getInfoPort());
    }
    for (int i = 0; i < nodeManagers; i++) {
      NodeManager nm = yarn.getNodeManager(i);
      NodeId id = nm.getNMContext().getNodeId();
      addresses.put("nodemanager." + i + ".node_id", id.toString());
      addresses.put("nodemanager." + i + ".http_address", id.getHost() + ":" + nm.getNMContext().getHttpPort());
    }
    writeJson(new File(stateDir, "run/addresses.json").toPath(), addresses);
  }

  /**
   * Puts NodeManager INDEX on the loopback address 127.0.0.(INDEX+1) instead of every one on
   * localhost, so that each is a host of its own: YARN places containers on hosts, and a request
   * for one host (locality), or for tasks on distinct hosts, cannot tell apart NodeManagers that
   * share one. MiniYARNCluster writes localhost into each NodeManager's configuration as it
   * initialises them; the NodeManagers read their addresses only when they start, so the
   * addresses are replaced in between. A node's id is its address's host name, and 127.0.0.2 and
   * above have none here, so they are named by their address.
   */
  private static void giveNodeManagersHostsOfTheirOwn(int nodeManagers) {
    for (int i = 0; i < nodeManagers; i++) {
      Configuration nm = yarn.getNodeManager(i).getConfig();
      String host = "127.0.0." + (i + 1);
      nm.set(YarnConfiguration.NM_ADDRESS, host + ":0");
      nm.set(YarnConfiguration.NM_LOCALIZER_ADDRESS, host + ":0");
      WebAppUtils.setNMWebAppHostNameAndPort(nm, host, 0);
    }
  }

  /**
   * Gives NodeManagers exclusive node labels, as {@code yarn rmadmin -addToClusterNodeLabels} and
   * {@code -replaceLabelsOnNode} would ("centralized" labels): a label belongs to the
   * ResourceManager's view of a node, and every NodeManager here shares one configuration, so a
   * NodeManager could not announce a label of its own. {@code spec} is {@code LABEL=INDEX,...}.
   */
  private static void labelNodes(String spec, int nodeManagers) throws IOException {
    if (spec.trim().isEmpty()) {
      return;
    }
    Map<NodeId, Set<String>> labelsOfNode = new HashMap<>();
    Map<String, NodeLabel> labels = new LinkedHashMap<>();
    for (String item : spec.split(",")) {
      String[] parts = item.trim().split("=", 2);
      int index = parts.length == 2 ? Integer.parseInt(parts[1].trim()) : -1;
      if (parts[0].trim().isEmpty() || index < 0 || index >= nodeManagers) {
        throw new IllegalArgumentException(NODE_LABELS_KEY + " takes LABEL=INDEX with 0 <= INDEX < "
            + nodeManagers + ", not " + item);
      }
      String label = parts[0].trim();
      labels.put(label, NodeLabel.newInstance(label, true));
      NodeId id = yarn.getNodeManager(index).getNMContext().getNodeId();
      labelsOfNode.computeIfAbsent(id, k -> new HashSet<>()).add(label);
    }
    RMNodeLabelsManager manager = yarn.getResourceManager().getRMContext().getNodeLabelManager();
    manager.addToCluserNodeLabels(new ArrayList<>(labels.values()));
    manager.replaceLabelsOnNode(labelsOfNode);
  }

  /**
   * Stops a NodeManager when the launcher asks: it writes {@code run/control/stop-nodemanager-INDEX}
   * and this renames the file to {@code ...done}, holding "stopped NODE_ID" or why not.
   *
   * <p>A file rather than a port: only who may write the cluster's directory can ask (as only they
   * can stop the whole cluster), there is no port to pick, publish or guard, a secure cluster needs
   * nothing more, and a request written while this JVM is busy waits instead of being refused.
   * Polling twice a second is quick enough for a request that is made once per test.
   */
  private static void serveControlRequests(File stateDir) {
    File control = new File(stateDir, CONTROL_DIR);
    while (true) {
      File[] requests = control.listFiles((dir, name) -> (name.startsWith(STOP_NODEMANAGER)
          || name.startsWith(STOP_DATANODE)) && !name.contains("."));
      for (File request : requests == null ? new File[0] : requests) {
        String outcome;
        try {
          String name = request.getName();
          outcome = "stopped " + (name.startsWith(STOP_DATANODE)
              ? loseDataNode(Integer.parseInt(name.substring(STOP_DATANODE.length())))
              : loseNodeManager(Integer.parseInt(name.substring(STOP_NODEMANAGER.length()))));
        } catch (Throwable t) {
          outcome = "error: " + t;
          t.printStackTrace();
        }
        try {
          writeAtomically(new File(control, request.getName() + ".done").toPath(), outcome + "\n");
          Files.deleteIfExists(request.toPath());
        } catch (IOException e) {
          e.printStackTrace();
        }
      }
      try {
        Thread.sleep(500);
      } catch (InterruptedException e) {
        return;
      }
    }
  }

  /**
   * Stops NodeManager {@code index} the way a machine dies: its containers' processes are killed
   * and the ResourceManager is not told, so it declares the node LOST once
   * {@code yarn.nm.liveness-monitor.expiry-interval-ms} passes without a heartbeat, and reports
   * the node's containers as ABORTED ("Container released on a *lost* node").
   *
   * <p>A NodeManager that stops normally unregisters (the node turns SHUTDOWN at once) and kills
   * its containers. One marked decommissioned skips the unregistering, and still kills its
   * containers because it expects no restart to recover them; the mark has no other effect on a
   * NodeManager without a recovery store, as here. Returns the node's id.
   */
  private static String loseNodeManager(int index) {
    if (index < 0 || index >= nodeManagerCount) {
      throw new IllegalArgumentException("no NodeManager " + index + "; there are " + nodeManagerCount);
    }
    NodeManager nm = yarn.getNodeManager(index);
    System.out.println("tony-minicluster: stopping NodeManager " + index + " (" + nm.getNMContext().getNodeId()
        + ") without telling the ResourceManager");
    System.out.flush();
    nm.getNMContext().setDecommissioned(true);
    nm.stop();
    return nm.getNMContext().getNodeId().toString();
  }

  /**
   * Stops DataNode {@code index} the way a machine dies: the NameNode is not told, so it keeps
   * the node's replicas in the blocks' locations (and keeps sending readers there) until the node
   * misses its heartbeats for {@code dfs.namenode.heartbeat.recheck-interval} (ten minutes by
   * default). Returns its data transfer address, as the NameNode names it.
   */
  private static String loseDataNode(int index) {
    if (index < 0 || index >= dataNodeNames.size()) {
      throw new IllegalArgumentException("no DataNode " + index + "; there are " + dataNodeNames.size());
    }
    // MiniDFSCluster drops a stopped DataNode from its list, so a node's place in it moves as
    // others stop: the node is found by the address it had at start.
    String name = dataNodeNames.get(index);
    List<DataNode> running = dfs.getDataNodes();
    for (int i = 0; i < running.size(); i++) {
      if (NetUtils.getHostPortString(running.get(i).getXferAddress()).equals(name)) {
        System.out.println("tony-minicluster: stopping DataNode " + index + " (" + name + ") without telling the NameNode");
        System.out.flush();
        dfs.stopDataNode(i);
        return name;
      }
    }
    throw new IllegalArgumentException("DataNode " + index + " (" + name + ") is already stopped");
  }

  /**
   * Stops YARN before HDFS: NodeManagers may still be writing to HDFS; and the KDC last, as the
   * daemons may still ask it for tickets. Whatever one of them throws, the others must still stop
   * and the JVM must still exit.
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
    try {
      if (kdc != null) {
        kdc.stop();
      }
    } catch (Throwable t) {
      t.printStackTrace();
    }
  }

  /** Writes a flat string map as JSON, via a rename so the launcher never reads half a file. */
  private static void writeJson(Path target, Map<String, String> values) throws IOException {
    StringBuilder sb = new StringBuilder("{");
    for (Map.Entry<String, String> e : values.entrySet()) {
      if (sb.length() > 1) {
        sb.append(", ");
      }
      sb.append(quote(e.getKey())).append(": ").append(quote(e.getValue()));
    }
    writeAtomically(target, sb.append("}\n").toString());
  }

  /** Writes a file via a rename, so that no reader ever sees half of it. */
  private static void writeAtomically(Path target, String text) throws IOException {
    Files.createDirectories(target.getParent());
    Path part = target.resolveSibling(target.getFileName() + ".part");
    try (Writer w = Files.newBufferedWriter(part, StandardCharsets.UTF_8)) {
      w.write(text);
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
