package tonyworkflow.azkaban;

import azkaban.ServiceProvider;
import azkaban.jobExecutor.AbstractProcessJob;
import azkaban.jobExecutor.Job;
import azkaban.jobtype.HadoopJobUtils;
import azkaban.jobtype.JobTypeManager;
import azkaban.jobtype.JobTypePluginSet;
import azkaban.utils.Props;
import azkaban.utils.PropsUtils;
import com.google.gson.GsonBuilder;
import com.google.inject.Guice;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Pattern;
import org.apache.log4j.FileAppender;
import org.apache.log4j.Level;
import org.apache.log4j.Logger;
import org.apache.log4j.PatternLayout;

/**
 * Runs one job the way an Azkaban executor does, with Azkaban's own classes: JobTypeManager loads
 * the plugin folder, builds the job from its props, and the resulting ProcessJob runs it.
 *
 * <pre>
 * AzkabanHarness run|cancel PLUGINS_DIR PROJECT_DIR JOB_NAME RESULT_DIR [KEY=VALUE ...]
 * </pre>
 *
 * The job's props are built as the executor builds them for a Flow 1.0 job at the project root:
 * the project's .properties files, under the flow's runtime properties, under the .job file; the
 * KEY=VALUE pairs are put on the job like a job override. RESULT_DIR receives job.log (the job's
 * log, in the executor's layout) and result.json, which the Python test checks. In cancel mode,
 * the job is cancelled once Azkaban's log scanner finds an application id in the log and, when
 * the system property harness.cancelAfter holds a regular expression, a log line matches it.
 *
 * On Java 9 and later it needs --add-opens java.base/java.lang=ALL-UNNAMED: Guice 4.1 defines
 * classes through reflection there, and ProcessJob reads the pid it signals on cancel that way.
 */
public final class AzkabanHarness {

  private static final String LOG_LAYOUT = "%d{dd-MM-yyyy HH:mm:ss z} %c{1} %p - %m\n";
  // The keys TonY's own Azkaban job type tags applications with.
  private static final String[] TONY_TAG_KEYS = {"azkaban.flow.execid", "azkaban.flow.flowid",
      "azkaban.flow.projectname", "azkaban.webserverhost"};

  private AzkabanHarness() {
  }

  public static void main(final String[] args) throws Exception {
    if (args.length < 5 || !Arrays.asList("run", "cancel").contains(args[0])) {
      System.err.println(
          "usage: AzkabanHarness run|cancel PLUGINS_DIR PROJECT_DIR JOB_NAME RESULT_DIR [KEY=VALUE ...]");
      System.exit(2);
    }
    final String mode = args[0];
    final File pluginsDir = new File(args[1]);
    final File projectDir = new File(args[2]).getAbsoluteFile();
    final String jobName = args[3];
    final File resultDir = new File(args[4]);
    resultDir.mkdirs();

    Logger.getRootLogger().setLevel(Level.WARN);
    final File jobLog = new File(resultDir, "job.log");
    final Logger logger = Logger.getLogger("azkaban.job." + jobName);
    logger.setLevel(Level.INFO);
    logger.addAppender(new FileAppender(new PatternLayout(LOG_LAYOUT), jobLog.getPath(), false));

    // ProcessJob takes its metrics and memory check from the executor's injector.
    ServiceProvider.SERVICE_PROVIDER.setInjector(Guice.createInjector());

    final Map<String, Object> result = new LinkedHashMap<>();
    result.put("mode", mode);

    final JobTypeManager manager = new JobTypeManager(pluginsDir.getPath(), new Props(),
        AzkabanHarness.class.getClassLoader());
    final JobTypePluginSet plugins = manager.getJobTypePluginSet();
    final Map<String, Object> types = new TreeMap<>();
    for (final String type : new String[]{"TensorFlowJob", "TonyJob"}) {
      final Class<?> cls = plugins.getPluginClass(type);
      final Props jobDefaults = plugins.getPluginJobProps(type);
      final Map<String, Object> info = new LinkedHashMap<>();
      info.put("class", cls == null ? null : cls.getName());
      info.put("command", jobDefaults == null ? null : jobDefaults.get("command"));
      types.put(type, info);
    }
    result.put("jobTypes", types);

    final Props jobProps = jobProps(projectDir, jobName, Arrays.copyOfRange(args, 5, args.length));
    final Job job = manager.buildJobExecutor(jobName, jobProps, logger);
    result.put("jobClass", job.getClass().getName());
    final Props built = ((AbstractProcessJob) job).getJobProps();
    result.put("resolvedCommand", built.get("command"));
    result.put("hadoopTags", HadoopJobUtils.constructHadoopTags(built, TONY_TAG_KEYS));

    final AtomicReference<Throwable> failure = new AtomicReference<>();
    final Thread runner = new Thread(() -> {
      try {
        job.run();
      } catch (final Throwable t) {
        failure.set(t);
      }
    }, "job-" + jobName);
    final long started = System.nanoTime();
    runner.start();

    if (mode.equals("cancel")) {
      final Set<String> ids = waitForApplication(jobLog, logger, runner, 300_000);
      result.put("idsBeforeCancel", new ArrayList<>(ids));
      final String cancelAfter = System.getProperty("harness.cancelAfter");
      if (cancelAfter != null) {
        waitForLine(jobLog, Pattern.compile(cancelAfter), runner, 300_000);
      }
      final long cancelStart = System.nanoTime();
      job.cancel();
      result.put("cancelSeconds", (System.nanoTime() - cancelStart) / 1e9);
    }
    runner.join(600_000);
    result.put("finished", !runner.isAlive());
    result.put("seconds", (System.nanoTime() - started) / 1e9);
    result.put("success", failure.get() == null);
    result.put("error", failure.get() == null ? null : String.valueOf(failure.get()));
    result.put("canceled", job.isCanceled());
    final Props output = job.getJobGeneratedProperties();
    result.put("outputProps", output == null ? null : new TreeMap<>(output.getFlattened()));
    result.put("applicationIds", new ArrayList<>(
        HadoopJobUtils.findApplicationIdFromLog(jobLog.getPath(), logger)));

    Files.write(new File(resultDir, "result.json").toPath(),
        new GsonBuilder().serializeNulls().setPrettyPrinting().create().toJson(result)
            .getBytes(StandardCharsets.UTF_8));
    System.exit(0);
  }

  /** The props the executor hands JobTypeManager for a Flow 1.0 job at the project's root. */
  private static Props jobProps(final File projectDir, final String jobName, final String[] overrides)
      throws IOException {
    final Props shared = PropsUtils.loadPropsInDir(projectDir, ".properties");
    final Props flow = new Props(shared);
    flow.put("azkaban.flow.flowid", "mnist");
    flow.put("azkaban.flow.execid", "42");
    flow.put("azkaban.flow.projectid", "7");
    flow.put("azkaban.flow.projectname", projectDir.getName());
    flow.put("azkaban.flow.projectversion", "3");
    flow.put("azkaban.flow.submituser", System.getProperty("user.name"));
    flow.put("azkaban.webserverhost", "azkaban.example.com");
    final Props job = new Props(flow, new File(projectDir, jobName + ".job"));
    job.put("azkaban.job.id", jobName);
    job.put("azkaban.job.attempt", "0");
    job.put("working.dir", projectDir.getPath());
    job.put("user.to.proxy", System.getProperty("user.name"));
    for (final String pair : overrides) {
      final int eq = pair.indexOf('=');
      job.put(pair.substring(0, eq), pair.substring(eq + 1));
    }
    return job;
  }

  private static Set<String> waitForApplication(final File jobLog, final Logger logger, final Thread runner,
      final long timeoutMs) throws InterruptedException {
    final long deadline = System.currentTimeMillis() + timeoutMs;
    while (System.currentTimeMillis() < deadline && runner.isAlive()) {
      final Set<String> ids = HadoopJobUtils.findApplicationIdFromLog(jobLog.getPath(), logger);
      if (!ids.isEmpty()) {
        return ids;
      }
      Thread.sleep(200);
    }
    throw new IllegalStateException("no application id appeared in " + jobLog);
  }

  private static void waitForLine(final File jobLog, final Pattern pattern, final Thread runner,
      final long timeoutMs) throws InterruptedException, IOException {
    final long deadline = System.currentTimeMillis() + timeoutMs;
    while (System.currentTimeMillis() < deadline && runner.isAlive()) {
      for (final String line : Files.readAllLines(jobLog.toPath(), StandardCharsets.UTF_8)) {
        if (pattern.matcher(line).find()) {
          return;
        }
      }
      Thread.sleep(200);
    }
    throw new IllegalStateException("no line of " + jobLog + " matched " + pattern);
  }
}
