package org.apache.hadoop.io;

import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * The mini cluster's stand-in for Hadoop's class of this name, first on the daemons' classpath.
 *
 * <p>On a secure cluster a NodeManager opens a container's log (to serve it over REST, to
 * aggregate it) only after checking that the file belongs to the application's user, and
 * Hadoop reads the owner with its native library, which the jars from Maven Central do not
 * carry: every such read then fails. This class makes the same check with Java's own POSIX
 * file attributes, on the descriptor's path just opened, and has the same public methods. On a
 * cluster without security, files are opened as they are, as Hadoop's does.
 */
public class SecureIOUtils {

  /** Thrown by {@link #createForWrite} when the file is already there. */
  public static class AlreadyExistsException extends IOException {
    private static final long serialVersionUID = 1L;

    public AlreadyExistsException(String msg) {
      super(msg);
    }

    public AlreadyExistsException(Throwable cause) {
      super(cause);
    }
  }

  public SecureIOUtils() {
  }

  private static boolean secure() {
    return UserGroupInformation.isSecurityEnabled();
  }

  public static RandomAccessFile openForRandomRead(File f, String mode, String expectedOwner, String expectedGroup)
      throws IOException {
    return secure() ? forceSecureOpenForRandomRead(f, mode, expectedOwner, expectedGroup) : new RandomAccessFile(f, mode);
  }

  protected static RandomAccessFile forceSecureOpenForRandomRead(File f, String mode, String expectedOwner,
      String expectedGroup) throws IOException {
    RandomAccessFile raf = new RandomAccessFile(f, mode);
    return checked(raf, f, expectedOwner, expectedGroup);
  }

  public static FSDataInputStream openFSDataInputStream(File file, String expectedOwner, String expectedGroup)
      throws IOException {
    FileSystem raw = FileSystem.getLocal(new org.apache.hadoop.conf.Configuration()).getRaw();
    FSDataInputStream in = raw.open(new Path(file.getAbsolutePath()));
    return secure() ? checked(in, file, expectedOwner, expectedGroup) : in;
  }

  protected static FSDataInputStream forceSecureOpenFSDataInputStream(File file, String expectedOwner,
      String expectedGroup) throws IOException {
    FileSystem raw = FileSystem.getLocal(new org.apache.hadoop.conf.Configuration()).getRaw();
    return checked(raw.open(new Path(file.getAbsolutePath())), file, expectedOwner, expectedGroup);
  }

  public static FileInputStream openForRead(File f, String expectedOwner, String expectedGroup) throws IOException {
    return secure() ? forceSecureOpenForRead(f, expectedOwner, expectedGroup) : new FileInputStream(f);
  }

  protected static FileInputStream forceSecureOpenForRead(File f, String expectedOwner, String expectedGroup)
      throws IOException {
    return checked(new FileInputStream(f), f, expectedOwner, expectedGroup);
  }

  /** Creates {@code f} with {@code permissions} (as octal bits), refusing one that is already there. */
  public static FileOutputStream createForWrite(File f, int permissions) throws IOException {
    String mode = String.format("%03o", permissions & 0777);
    StringBuilder rwx = new StringBuilder();
    for (char c : mode.toCharArray()) {
      int bits = c - '0';
      rwx.append((bits & 4) != 0 ? 'r' : '-').append((bits & 2) != 0 ? 'w' : '-').append((bits & 1) != 0 ? 'x' : '-');
    }
    try {
      Files.createFile(f.toPath(), PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString(rwx.toString())));
    } catch (FileAlreadyExistsException e) {
      throw new AlreadyExistsException(e);
    }
    return new FileOutputStream(f);
  }

  /** Closes {@code opened} and throws unless {@code f} belongs to the owner and group expected. */
  private static <T extends java.io.Closeable> T checked(T opened, File f, String expectedOwner, String expectedGroup)
      throws IOException {
    boolean ok = false;
    try {
      PosixFileAttributes attributes = Files.readAttributes(f.toPath(), PosixFileAttributes.class,
          LinkOption.NOFOLLOW_LINKS);
      String owner = attributes.owner().getName();
      String group = attributes.group().getName();
      if (expectedOwner != null && !expectedOwner.equals(owner)) {
        throw new IOException(f + " belongs to '" + owner + "', not to '" + expectedOwner + "' as expected");
      }
      if (expectedGroup != null && !expectedGroup.equals(group)) {
        throw new IOException(f + " is of group '" + group + "', not of '" + expectedGroup + "' as expected");
      }
      ok = true;
      return opened;
    } finally {
      if (!ok) {
        opened.close();
      }
    }
  }
}
