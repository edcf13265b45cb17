// ollama-compat-mountd: the read path of an ollama-compat mount (libfuse 3, low-level API).
//
// The files of the mount are virtual: each is a plan its controller (the Node process that
// started us, @compat/mount) sends over stdin, a list of extents that together cover the
// file: bytes held here (the GGUF header), byte ranges of source files (the Ollama blob),
// zeros (alignment padding), and sidecar files (op tensors, computed once by the controller
// and written into its cache). Reads are served here, on libfuse's worker threads, with
// pread: no request goes through JavaScript, except the first read of a sidecar after its file
// is opened, which asks the controller to vouch for it (check the sha256 written after its bytes,
// or write it when it is missing or not whole) and waits.
//
// A source is opened when its file is added and identified by (dev, inode, size, mtime), as
// the controller saw it when it planned the file, and by the ctime it had when we opened it
// (a write whose mtime is set back still moves it). Every read that touches a source checks the
// path still names that same file, and an inotify watch on the sources' folders invalidates
// the kernel's cache of every file that uses a source that changed or went away: a changed or
// removed source gives EIO, never stale bytes.
//
// Protocol (little-endian): each message is u32 length (of what follows), u8 type, u32 id,
// then the payload. A file's extents carry their offsets in it: the layout is the controller's
// (@compat/gguf's layoutGguf), checked here, never worked out again. Strings are u32 length + bytes. See src/protocol.ts for the other side.
// The controller closing stdin (it stopped or died) unmounts and ends this process.

#define FUSE_USE_VERSION 312
#define _GNU_SOURCE
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum { MSG_ADD_FILE = 1, MSG_ADD_LINK = 2, MSG_REMOVE = 3, MSG_FILLED = 4, MSG_STOP = 5 };
enum { MSG_READY = 64, MSG_ACK = 65, MSG_FILL = 66 };
enum { EXT_ZERO = 0, EXT_MEMORY = 1, EXT_SOURCE = 2, EXT_SIDECAR = 3 };

/** The largest read the kernel sends (max_read): 1 MiB, FUSE's max_pages limit. */
#define MAX_READ (1u << 20)
/** How far ahead of the reads a source is asked of the disk (source_prefetch). */
#define PREFETCH (32u << 20)
/** How far behind the reads a source's pages are dropped from the cache, and in what steps (source_served). */
#define DROP_STEP (8u << 20)
/** How long the kernel may keep names and attributes: every change is also invalidated at once. */
#define CACHE_SECONDS 1.0

static void logf_(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("ollama-compat-mountd: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

// ---------------------------------------------------------------------------------------------
// Sources: files we read ranges of, shared by every virtual file that uses them.

struct source {
  char *path;
  const char *name; // basename of path, for inotify events
  int wd;           // inotify watch of its folder
  dev_t dev;
  ino_t ino;
  off_t size;
  int64_t mtime_ns;
  int64_t ctime_ns; // as the daemon opened it: a write with its mtime set back still moves the ctime
  int fd;
  atomic_int bad;         // set once: the path no longer names the file we opened
  atomic_int invalidated; // the kernel was told to drop the pages of files using it
  _Atomic uint64_t ahead;   // asked of the disk up to here (source_prefetch)
  _Atomic uint64_t dropped; // its pages dropped from the cache up to here (source_served)
  int refs;       // under sources_lock
  struct source *next;
};

static pthread_mutex_t sources_lock = PTHREAD_MUTEX_INITIALIZER;
static struct source *sources;
static int inotify_fd = -1;

static int64_t mtime_ns_of(const struct stat *st) { return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec; }
static int64_t ctime_ns_of(const struct stat *st) { return (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec; }

static int same_file(const struct source *s, const struct stat *st) {
  return st->st_dev == s->dev && st->st_ino == s->ino && st->st_size == s->size && mtime_ns_of(st) == s->mtime_ns;
}

/** Whether the source still is the file it was planned from (a stat of its path: cheap next to a read). */
static int source_ok(struct source *s) {
  if (atomic_load(&s->bad)) return 0;
  struct stat st;
  if (stat(s->path, &st) != 0 || !same_file(s, &st) || ctime_ns_of(&st) != s->ctime_ns) {
    if (!atomic_exchange(&s->bad, 1)) logf_("source changed or removed: %s (reads of files using it now fail with EIO)", s->path);
    return 0;
  }
  return 1;
}

/** The shared source for (path, identity), opened and checked; NULL with errno set when it is not that file. */
static struct source *source_get(const char *path, dev_t dev, ino_t ino, off_t size, int64_t mtime_ns) {
  pthread_mutex_lock(&sources_lock);
  for (struct source *s = sources; s; s = s->next) {
    if (!atomic_load(&s->bad) && s->dev == dev && s->ino == ino && s->size == size && s->mtime_ns == mtime_ns && strcmp(s->path, path) == 0) {
      s->refs++;
      pthread_mutex_unlock(&sources_lock);
      return s;
    }
  }
  pthread_mutex_unlock(&sources_lock);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  struct source probe = {.dev = dev, .ino = ino, .size = size, .mtime_ns = mtime_ns};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !same_file(&probe, &st)) {
    close(fd);
    errno = ESTALE;
    return NULL;
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); // llama.cpp reads a model front to back
  struct source *s = calloc(1, sizeof *s);
  s->path = strdup(path);
  const char *slash = strrchr(s->path, '/');
  s->name = slash ? slash + 1 : s->path;
  s->dev = dev;
  s->ino = ino;
  s->size = size;
  s->mtime_ns = mtime_ns;
  s->ctime_ns = ctime_ns_of(&st);
  s->fd = fd;
  s->refs = 1;
  s->wd = -1;
  if (inotify_fd >= 0 && slash) {
    *(char *)slash = 0; // watch the folder: a rename or unlink of the file is an event there
    s->wd = inotify_add_watch(inotify_fd, s->path[0] ? s->path : "/", IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF);
    *(char *)slash = '/';
  }
  pthread_mutex_lock(&sources_lock);
  s->next = sources;
  sources = s;
  pthread_mutex_unlock(&sources_lock);
  return s;
}

static void source_put(struct source *s) {
  pthread_mutex_lock(&sources_lock);
  if (--s->refs > 0) {
    pthread_mutex_unlock(&sources_lock);
    return;
  }
  for (struct source **p = &sources; *p; p = &(*p)->next) {
    if (*p == s) {
      *p = s->next;
      break;
    }
  }
  pthread_mutex_unlock(&sources_lock);
  // the folder's watch stays: other sources share it, and inotify_add_watch returns the same wd
  close(s->fd);
  free(s->path);
  free(s);
}

// ---------------------------------------------------------------------------------------------
// Sidecars: files of computed bytes, written by the controller on first use. Their names say
// what the bytes are made from, not what they are: each file ends with the sha256 of its bytes,
// and one is opened only once the controller has checked it (or written it) for this open.

/** The sha256 after a sidecar's bytes (src/sidecar.ts's SIDECAR_DIGEST_BYTES). */
#define SIDECAR_DIGEST_BYTES 32

// ABSENT: not vouched for since the file was (first) opened; PENDING: asked; VOUCHED: the
// controller answered that it is whole; READY: open (sc->fd).
enum { SIDECAR_ABSENT, SIDECAR_PENDING, SIDECAR_VOUCHED, SIDECAR_READY, SIDECAR_FAILED };

struct sidecar {
  char *path;
  uint64_t size; // of its bytes, without the digest after them
  int fd;
  int state; // under fill_lock
  int err;
  uint32_t fill_id;
};

static pthread_mutex_t fill_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fill_done = PTHREAD_COND_INITIALIZER;
static atomic_uint next_fill_id = 1;
static int controller_gone; // under fill_lock: no fill will ever be answered
/** Sidecars waiting for the controller's answer, by fill id. Under fill_lock. */
static struct sidecar **pending;
static size_t npending, pending_cap;

// ---------------------------------------------------------------------------------------------
// Virtual files and the tree.

struct extent {
  uint64_t at; // offset in the virtual file
  uint64_t length;
  uint8_t kind;
  uint32_t index; // source or sidecar index
  uint64_t offset; // in the source, sidecar or memory
};

struct vfile {
  atomic_int refs; // the node and every open handle
  uint64_t size;
  uint8_t *memory;
  uint64_t memory_size;
  uint32_t nsources, nsidecars, nextents;
  uint32_t handles; // open handles, under fill_lock: the first open has the sidecars vouched for again
  struct source **sources;
  struct sidecar *sidecars;
  struct extent *extents;
};

enum { NODE_DIR, NODE_FILE, NODE_LINK };

struct node {
  fuse_ino_t ino;
  int kind;
  char *name;
  struct node *parent;
  struct node **children;
  uint32_t nchildren, cap;
  struct vfile *file;
  char *target;
  struct timespec mtime;
  uint64_t nlookup; // the kernel's references
  int attached;     // in the tree
};

static pthread_rwlock_t tree_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct node **nodes; // by inode number; never reused
static fuse_ino_t nnodes, nodes_cap;
static struct fuse_session *session;
static uid_t owner_uid;
static gid_t owner_gid;

static void vfile_put(struct vfile *f) {
  if (atomic_fetch_sub(&f->refs, 1) != 1) return;
  for (uint32_t i = 0; i < f->nsources; i++) source_put(f->sources[i]);
  for (uint32_t i = 0; i < f->nsidecars; i++) {
    if (f->sidecars[i].fd >= 0) close(f->sidecars[i].fd);
    free(f->sidecars[i].path);
  }
  free(f->sources);
  free(f->sidecars);
  free(f->extents);
  free(f->memory);
  free(f);
}

static struct node *node_new(int kind, const char *name) {
  if (nnodes == nodes_cap) {
    nodes_cap = nodes_cap ? nodes_cap * 2 : 64;
    nodes = realloc(nodes, nodes_cap * sizeof *nodes);
  }
  struct node *n = calloc(1, sizeof *n);
  n->ino = nnodes;
  n->kind = kind;
  n->name = strdup(name);
  n->attached = 1;
  clock_gettime(CLOCK_REALTIME, &n->mtime);
  nodes[nnodes++] = n;
  return n;
}

/** Frees a node the tree and the kernel are both done with. Under the write lock. */
static void node_maybe_free(struct node *n) {
  if (n->attached || n->nlookup > 0 || n->ino == FUSE_ROOT_ID) return;
  nodes[n->ino] = NULL;
  if (n->file) vfile_put(n->file);
  free(n->children);
  free(n->target);
  free(n->name);
  free(n);
}

static struct node *node_get(fuse_ino_t ino) { return ino < nnodes ? nodes[ino] : NULL; }

static struct node *child_of(struct node *dir, const char *name) {
  for (uint32_t i = 0; i < dir->nchildren; i++)
    if (strcmp(dir->children[i]->name, name) == 0) return dir->children[i];
  return NULL;
}

static void child_add(struct node *dir, struct node *n) {
  if (dir->nchildren == dir->cap) {
    dir->cap = dir->cap ? dir->cap * 2 : 8;
    dir->children = realloc(dir->children, dir->cap * sizeof *dir->children);
  }
  dir->children[dir->nchildren++] = n;
  n->parent = dir;
  clock_gettime(CLOCK_REALTIME, &dir->mtime);
}

static void child_remove(struct node *dir, struct node *n) {
  for (uint32_t i = 0; i < dir->nchildren; i++) {
    if (dir->children[i] == n) {
      dir->children[i] = dir->children[--dir->nchildren];
      break;
    }
  }
  clock_gettime(CLOCK_REALTIME, &dir->mtime);
}

/** Kernel invalidations to send once the tree lock is released (sending under it could deadlock). */
struct inval {
  fuse_ino_t parent; // 0: inode data only
  fuse_ino_t ino;
  char *name;
};
struct invals {
  struct inval *v;
  size_t n, cap;
};

static void inval_push(struct invals *iv, fuse_ino_t parent, fuse_ino_t ino, const char *name) {
  if (iv->n == iv->cap) {
    iv->cap = iv->cap ? iv->cap * 2 : 8;
    iv->v = realloc(iv->v, iv->cap * sizeof *iv->v);
  }
  iv->v[iv->n++] = (struct inval){parent, ino, name ? strdup(name) : NULL};
}

static void inval_send(struct invals *iv) {
  for (size_t i = 0; i < iv->n; i++) {
    if (session) {
      if (iv->v[i].name) fuse_lowlevel_notify_inval_entry(session, iv->v[i].parent, iv->v[i].name, strlen(iv->v[i].name));
      if (iv->v[i].ino) fuse_lowlevel_notify_inval_inode(session, iv->v[i].ino, 0, 0);
    }
    free(iv->v[i].name);
  }
  free(iv->v);
  *iv = (struct invals){0};
}

/** Detaches a subtree from the tree. Under the write lock. */
static void detach(struct node *n, struct invals *iv) {
  while (n->nchildren > 0) detach(n->children[n->nchildren - 1], iv);
  if (n->parent) {
    inval_push(iv, n->parent->ino, n->kind == NODE_FILE ? n->ino : 0, n->name);
    child_remove(n->parent, n);
  }
  n->attached = 0;
  node_maybe_free(n);
}

/** Removes empty folders above `dir` (a model's folder once its files are gone). Under the write lock. */
static void prune(struct node *dir, struct invals *iv) {
  while (dir && dir->ino != FUSE_ROOT_ID && dir->nchildren == 0) {
    struct node *up = dir->parent;
    detach(dir, iv);
    dir = up;
  }
}

/** The folder that holds `path` (created as needed) and the last component in *leaf. Under the write lock. */
/**
 * The folder that holds `path`'s last part (left in `leaf`). With `iv`, missing folders are made,
 * and the kernel is told to forget a "no such name" it may have cached for each (a lookup just
 * before the name was added would otherwise hide it for as long as names are cached).
 */
static struct node *parent_dir(char *path, char **leaf, struct invals *iv) {
  struct node *dir = nodes[FUSE_ROOT_ID];
  char *save = NULL;
  char *part = strtok_r(path, "/", &save);
  while (part) {
    char *next = strtok_r(NULL, "/", &save);
    if (!next) {
      *leaf = part;
      return dir;
    }
    if (strcmp(part, ".") == 0 || strcmp(part, "..") == 0) return NULL;
    struct node *c = child_of(dir, part);
    if (!c) {
      if (!iv) return NULL;
      c = node_new(NODE_DIR, part);
      child_add(dir, c);
      inval_push(iv, dir->ino, 0, part);
    } else if (c->kind != NODE_DIR) {
      return NULL;
    }
    dir = c;
    part = next;
  }
  return NULL;
}

// ---------------------------------------------------------------------------------------------
// The controller channel.

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static int write_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/** One message to the controller: type, id, then an int32 and a string (either may be unused). */
static void send_msg(uint8_t type, uint32_t id, int32_t code, const char *text) {
  size_t tl = text ? strlen(text) : 0;
  size_t body = 1 + 4 + 4 + 4 + tl;
  uint8_t *m = malloc(4 + body);
  put32(m, (uint32_t)body);
  m[4] = type;
  put32(m + 5, id);
  put32(m + 9, (uint32_t)code);
  put32(m + 13, (uint32_t)tl);
  if (tl) memcpy(m + 17, text, tl);
  pthread_mutex_lock(&out_lock);
  write_all(STDOUT_FILENO, m, 4 + body);
  pthread_mutex_unlock(&out_lock);
  free(m);
}

struct reader {
  const uint8_t *p, *end;
  int bad;
};

static uint64_t rd(struct reader *r, int bytes) {
  if (r->end - r->p < bytes) {
    r->bad = 1;
    return 0;
  }
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[i] << (8 * i);
  r->p += bytes;
  return v;
}

/** A string of the message, NUL-terminated in a fresh allocation (NULL when malformed). */
static char *rd_str(struct reader *r) {
  uint64_t n = rd(r, 4);
  if (r->bad || (uint64_t)(r->end - r->p) < n || n > PATH_MAX) {
    r->bad = 1;
    return NULL;
  }
  char *s = malloc(n + 1);
  memcpy(s, r->p, n);
  s[n] = 0;
  r->p += n;
  if (strlen(s) != n) { // a NUL inside
    free(s);
    r->bad = 1;
    return NULL;
  }
  return s;
}

/** Parses an ADD_FILE payload into a vfile; the error message in *why when it is not valid. */
static struct vfile *parse_file(struct reader *r, char **why, int *err) {
  static char msg[PATH_MAX + 128];
  struct vfile *f = calloc(1, sizeof *f);
  atomic_init(&f->refs, 1);
  f->size = rd(r, 8);
  f->nsources = (uint32_t)rd(r, 4);
  if (r->bad || f->nsources > 1024) goto malformed;
  f->sources = calloc(f->nsources ? f->nsources : 1, sizeof *f->sources);
  for (uint32_t i = 0; i < f->nsources; i++) {
    char *path = rd_str(r);
    uint64_t dev = rd(r, 8), ino = rd(r, 8), size = rd(r, 8);
    int64_t mtime = (int64_t)rd(r, 8);
    if (r->bad) {
      free(path);
      goto malformed;
    }
    f->sources[i] = source_get(path, (dev_t)dev, (ino_t)ino, (off_t)size, mtime);
    if (!f->sources[i]) {
      *err = errno;
      snprintf(msg, sizeof msg, "%s: %s", path, errno == ESTALE ? "not the file that was planned (changed since)" : strerror(errno));
      free(path);
      *why = msg;
      f->nsources = i;
      vfile_put(f);
      return NULL;
    }
    free(path);
  }
  f->nsidecars = (uint32_t)rd(r, 4);
  if (r->bad || f->nsidecars > 1u << 20) goto malformed;
  f->sidecars = calloc(f->nsidecars ? f->nsidecars : 1, sizeof *f->sidecars);
  for (uint32_t i = 0; i < f->nsidecars; i++) {
    f->sidecars[i].fd = -1;
    f->sidecars[i].path = rd_str(r);
    f->sidecars[i].size = rd(r, 8);
    if (r->bad) goto malformed;
  }
  f->nextents = (uint32_t)rd(r, 4);
  if (r->bad || f->nextents > 1u << 24) goto malformed;
  f->extents = calloc(f->nextents ? f->nextents : 1, sizeof *f->extents);
  // The extents come with their offsets in the file (the controller's layout): they are taken
  // as they are, and checked to tile the file, each starting where the one before ends.
  uint64_t at = 0;
  for (uint32_t i = 0; i < f->nextents; i++) {
    struct extent *e = &f->extents[i];
    e->at = rd(r, 8);
    e->kind = (uint8_t)rd(r, 1);
    e->index = (uint32_t)rd(r, 4);
    e->offset = rd(r, 8);
    e->length = rd(r, 8);
    if (r->bad) goto malformed;
    if (e->at != at || e->length > UINT64_MAX - at) {
      snprintf(msg, sizeof msg, "extent %u starts at %llu, where the one before ends at %llu", i, (unsigned long long)e->at, (unsigned long long)at);
      *why = msg;
      vfile_put(f);
      return NULL;
    }
    at += e->length;
  }
  f->memory_size = rd(r, 8);
  if (r->bad || (uint64_t)(r->end - r->p) != f->memory_size) goto malformed;
  f->memory = malloc(f->memory_size ? f->memory_size : 1);
  memcpy(f->memory, r->p, f->memory_size);
  r->p += f->memory_size;
  if (at != f->size) {
    snprintf(msg, sizeof msg, "extents cover %llu bytes, the file has %llu", (unsigned long long)at, (unsigned long long)f->size);
    *why = msg;
    vfile_put(f);
    return NULL;
  }
  // Every extent within what it reads from: a read never goes past a source, sidecar or memory.
  for (uint32_t i = 0; i < f->nextents; i++) {
    struct extent *e = &f->extents[i];
    uint64_t limit;
    switch (e->kind) {
      case EXT_ZERO: limit = UINT64_MAX; break;
      case EXT_MEMORY: limit = f->memory_size; break;
      case EXT_SOURCE: limit = e->index < f->nsources ? (uint64_t)f->sources[e->index]->size : 0; break;
      case EXT_SIDECAR: limit = e->index < f->nsidecars ? f->sidecars[e->index].size : 0; break;
      default: limit = 0;
    }
    if (e->kind == EXT_ZERO) continue;
    if (e->offset > limit || e->length > limit - e->offset) {
      snprintf(msg, sizeof msg, "extent %u (kind %u) reads [%llu, +%llu) beyond its %llu bytes", i, e->kind, (unsigned long long)e->offset, (unsigned long long)e->length, (unsigned long long)limit);
      *why = msg;
      vfile_put(f);
      return NULL;
    }
  }
  return f;
malformed:
  *why = "malformed ADD_FILE message";
  vfile_put(f);
  return NULL;
}

/** Puts a new node at `path`, replacing what was there. Under the write lock. */
static int place(char *path, struct node *n, struct invals *iv) {
  char *leaf = NULL;
  struct node *dir = parent_dir(path, &leaf, iv);
  if (!dir || !leaf || strcmp(leaf, ".") == 0 || strcmp(leaf, "..") == 0) return EINVAL;
  struct node *old = child_of(dir, leaf);
  if (old) detach(old, iv); // which forgets the old entry
  else inval_push(iv, dir->ino, 0, leaf); // a cached negative entry for the new name
  free(n->name);
  n->name = strdup(leaf);
  child_add(dir, n);
  return 0;
}

static int handle_remove(char *path, struct invals *iv) {
  char *leaf = NULL;
  struct node *dir = parent_dir(path, &leaf, NULL);
  struct node *n = dir && leaf ? child_of(dir, leaf) : NULL;
  if (!n) return ENOENT;
  detach(n, iv);
  prune(dir, iv);
  return 0;
}

static void handle_message(uint8_t type, uint32_t id, struct reader *r) {
  struct invals iv = {0};
  int err = 0;
  char *why = NULL;
  switch (type) {
    case MSG_ADD_FILE: {
      char *path = rd_str(r);
      int64_t mtime = (int64_t)rd(r, 8);
      err = EINVAL;
      struct vfile *f = path && !r->bad ? parse_file(r, &why, &err) : NULL;
      if (f) err = 0;
      if (!f) {
        if (!why) why = "malformed ADD_FILE message";
      } else {
        pthread_rwlock_wrlock(&tree_lock);
        struct node *n = node_new(NODE_FILE, "");
        n->file = f;
        n->mtime = (struct timespec){mtime / 1000000000, mtime % 1000000000};
        err = place(path, n, &iv);
        if (err) {
          n->attached = 0;
          node_maybe_free(n);
          why = "bad path";
        }
        pthread_rwlock_unlock(&tree_lock);
      }
      free(path);
      break;
    }
    case MSG_ADD_LINK: {
      char *path = rd_str(r);
      char *target = rd_str(r);
      int64_t mtime = (int64_t)rd(r, 8);
      if (!path || !target || r->bad) {
        err = EINVAL;
        why = "malformed ADD_LINK message";
      } else {
        pthread_rwlock_wrlock(&tree_lock);
        struct node *n = node_new(NODE_LINK, "");
        n->target = strdup(target);
        n->mtime = (struct timespec){mtime / 1000000000, mtime % 1000000000};
        err = place(path, n, &iv);
        if (err) {
          n->attached = 0;
          node_maybe_free(n);
          why = "bad path";
        }
        pthread_rwlock_unlock(&tree_lock);
      }
      free(path);
      free(target);
      break;
    }
    case MSG_REMOVE: {
      char *path = rd_str(r);
      if (!path || r->bad) {
        err = EINVAL;
        why = "malformed REMOVE message";
      } else {
        pthread_rwlock_wrlock(&tree_lock);
        err = handle_remove(path, &iv);
        pthread_rwlock_unlock(&tree_lock);
        if (err) why = "no such file";
      }
      free(path);
      break;
    }
    case MSG_FILLED: {
      int32_t code = (int32_t)rd(r, 4);
      pthread_mutex_lock(&fill_lock);
      for (size_t i = 0; i < npending; i++) {
        struct sidecar *sc = pending[i];
        if (sc->fill_id != id) continue;
        sc->state = code == 0 ? SIDECAR_VOUCHED : SIDECAR_FAILED; // VOUCHED: the waiter opens it
        sc->err = code;
        pending[i] = pending[--npending];
        break;
      }
      pthread_cond_broadcast(&fill_done);
      pthread_mutex_unlock(&fill_lock);
      return; // no acknowledgement
    }
    default:
      err = EINVAL;
      why = "unknown message type";
  }
  inval_send(&iv);
  send_msg(MSG_ACK, id, err, err ? why : NULL);
}

static void *control_thread(void *arg) {
  (void)arg;
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (;;) {
    uint8_t len4[4];
    size_t got = 0;
    while (got < 4) {
      ssize_t n = read(STDIN_FILENO, len4 + got, 4 - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) goto gone;
      got += (size_t)n;
    }
    uint32_t len = (uint32_t)len4[0] | (uint32_t)len4[1] << 8 | (uint32_t)len4[2] << 16 | (uint32_t)len4[3] << 24;
    if (len < 5 || len > (1u << 30)) {
      logf_("malformed message from the controller (length %u)", len);
      goto gone;
    }
    if (len > cap) {
      free(buf);
      cap = len;
      buf = malloc(cap);
    }
    got = 0;
    while (got < len) {
      ssize_t n = read(STDIN_FILENO, buf + got, len - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) goto gone;
      got += (size_t)n;
    }
    uint8_t type = buf[0];
    uint32_t id = (uint32_t)buf[1] | (uint32_t)buf[2] << 8 | (uint32_t)buf[3] << 16 | (uint32_t)buf[4] << 24;
    if (type == MSG_STOP) break;
    struct reader r = {buf + 5, buf + len, 0};
    handle_message(type, id, &r);
  }
gone:
  free(buf);
  // Stop: fail every waiting fill, then end the loop (the main thread unmounts).
  pthread_mutex_lock(&fill_lock);
  controller_gone = 1;
  pthread_cond_broadcast(&fill_done);
  pthread_mutex_unlock(&fill_lock);
  if (session) fuse_session_exit(session);
  kill(getpid(), SIGTERM); // wakes the loop's main thread (libfuse's handler; workers block it)
  return NULL;
}

// ---------------------------------------------------------------------------------------------
// Source watch: a change under a source's folder re-checks the sources named by the event.

static void *watch_thread(void *arg) {
  (void)arg;
  char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    ssize_t n = read(inotify_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return NULL;
    for (char *p = buf; p < buf + n;) {
      struct inotify_event *ev = (struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      int all = (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_Q_OVERFLOW)) != 0;
      // Which sources the event names, and whether they still are what we opened.
      struct source **bad = NULL;
      size_t nbad = 0;
      pthread_mutex_lock(&sources_lock);
      for (struct source *s = sources; s; s = s->next) {
        if (!all && (s->wd != ev->wd || ev->len == 0 || strcmp(s->name, ev->name) != 0)) continue;
        if (source_ok(s) && (ev->mask & IN_MODIFY) && !atomic_exchange(&s->bad, 1)) {
          logf_("source written to: %s (reads of files using it now fail with EIO)", s->path); // same inode, new bytes
        }
        if (!atomic_load(&s->bad) || atomic_exchange(&s->invalidated, 1)) continue;
        bad = realloc(bad, (nbad + 1) * sizeof *bad);
        bad[nbad++] = s;
      }
      pthread_mutex_unlock(&sources_lock);
      if (nbad == 0) continue;
      // Drop the kernel's cached pages of every file that reads one of them.
      struct invals iv = {0};
      pthread_rwlock_rdlock(&tree_lock);
      for (fuse_ino_t i = 0; i < nnodes; i++) {
        struct node *nd = nodes[i];
        if (!nd || !nd->file) continue;
        for (uint32_t k = 0; k < nd->file->nsources; k++) {
          for (size_t b = 0; b < nbad; b++) {
            if (nd->file->sources[k] == bad[b]) {
              inval_push(&iv, 0, nd->ino, NULL);
              goto next_node;
            }
          }
        }
      next_node:;
      }
      pthread_rwlock_unlock(&tree_lock);
      free(bad);
      inval_send(&iv);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Filesystem operations.

static void fill_stat(const struct node *n, struct stat *st) {
  memset(st, 0, sizeof *st);
  st->st_ino = n->ino;
  st->st_uid = owner_uid;
  st->st_gid = owner_gid;
  st->st_mtim = st->st_ctim = st->st_atim = n->mtime;
  st->st_blksize = 4096;
  switch (n->kind) {
    case NODE_DIR:
      st->st_mode = S_IFDIR | 0555;
      st->st_nlink = 2;
      break;
    case NODE_FILE:
      st->st_mode = S_IFREG | 0444;
      st->st_nlink = 1;
      st->st_size = (off_t)n->file->size;
      st->st_blocks = (blkcnt_t)((n->file->size + 511) / 512);
      break;
    case NODE_LINK:
      st->st_mode = S_IFLNK | 0777;
      st->st_nlink = 1;
      st->st_size = (off_t)strlen(n->target);
      break;
  }
}

static void op_init(void *userdata, struct fuse_conn_info *conn) {
  (void)userdata;
  conn->max_read = MAX_READ;
  conn->want |= FUSE_CAP_ASYNC_READ;
  if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
  conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA; // the files never change: their pages stay until we invalidate them
  if (conn->capable & FUSE_CAP_EXPLICIT_INVAL_DATA) conn->want |= FUSE_CAP_EXPLICIT_INVAL_DATA;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  pthread_rwlock_wrlock(&tree_lock); // nlookup changes
  struct node *dir = node_get(parent);
  struct node *n = dir && dir->kind == NODE_DIR ? child_of(dir, name) : NULL;
  if (!n) {
    pthread_rwlock_unlock(&tree_lock);
    struct fuse_entry_param neg = {.entry_timeout = CACHE_SECONDS};
    fuse_reply_entry(req, &neg); // a negative entry, cached for as long as names are
    return;
  }
  struct fuse_entry_param e = {.ino = n->ino, .generation = 1, .attr_timeout = CACHE_SECONDS, .entry_timeout = CACHE_SECONDS};
  fill_stat(n, &e.attr);
  n->nlookup++;
  pthread_rwlock_unlock(&tree_lock);
  if (fuse_reply_entry(req, &e) != 0) {
    pthread_rwlock_wrlock(&tree_lock);
    n->nlookup--;
    node_maybe_free(n);
    pthread_rwlock_unlock(&tree_lock);
  }
}

static void forget_one(fuse_ino_t ino, uint64_t count) {
  struct node *n = node_get(ino);
  if (!n) return;
  n->nlookup = count > n->nlookup ? 0 : n->nlookup - count;
  node_maybe_free(n);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  pthread_rwlock_wrlock(&tree_lock);
  forget_one(ino, nlookup);
  pthread_rwlock_unlock(&tree_lock);
  fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
  pthread_rwlock_wrlock(&tree_lock);
  for (size_t i = 0; i < count; i++) forget_one(forgets[i].ino, forgets[i].nlookup);
  pthread_rwlock_unlock(&tree_lock);
  fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  pthread_rwlock_rdlock(&tree_lock);
  struct node *n = node_get(ino);
  if (!n) {
    pthread_rwlock_unlock(&tree_lock);
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st;
  fill_stat(n, &st);
  pthread_rwlock_unlock(&tree_lock);
  fuse_reply_attr(req, &st, CACHE_SECONDS);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  pthread_rwlock_rdlock(&tree_lock);
  struct node *n = node_get(ino);
  char *target = n && n->kind == NODE_LINK ? strdup(n->target) : NULL;
  pthread_rwlock_unlock(&tree_lock);
  if (!target) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  fuse_reply_readlink(req, target);
  free(target);
}

/** An open handle of `f` is gone (released, or never handed out). */
static void file_closed(struct vfile *f) {
  pthread_mutex_lock(&fill_lock);
  f->handles--;
  pthread_mutex_unlock(&fill_lock);
  vfile_put(f);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
    fuse_reply_err(req, EROFS);
    return;
  }
  pthread_rwlock_rdlock(&tree_lock);
  struct node *n = node_get(ino);
  struct vfile *f = n && n->kind == NODE_FILE ? n->file : NULL;
  if (f) atomic_fetch_add(&f->refs, 1);
  pthread_rwlock_unlock(&tree_lock);
  if (!f) {
    fuse_reply_err(req, n ? EISDIR : ENOENT);
    return;
  }
  for (uint32_t i = 0; i < f->nsources; i++) {
    if (!source_ok(f->sources[i])) {
      vfile_put(f);
      fuse_reply_err(req, EIO);
      return;
    }
  }
  // The first open (none other is open, so no read is using a sidecar's fd): every sidecar is
  // vouched for again before its next byte is read, so one changed on disk since is found and
  // written again. Pages already cached were read from a sidecar that was vouched for.
  pthread_mutex_lock(&fill_lock);
  if (f->handles++ == 0) {
    for (uint32_t i = 0; i < f->nsidecars; i++) {
      struct sidecar *sc = &f->sidecars[i];
      if (sc->state != SIDECAR_READY) continue;
      close(sc->fd);
      sc->fd = -1;
      sc->state = SIDECAR_ABSENT;
      sc->fill_id = 0;
    }
  }
  pthread_mutex_unlock(&fill_lock);
  fi->fh = (uint64_t)(uintptr_t)f;
  fi->keep_cache = 1; // the bytes of this inode never change: keep its pages across opens
  fi->noflush = 1;
  if (fuse_reply_open(req, fi) != 0) file_closed(f);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino;
  file_closed((struct vfile *)(uintptr_t)fi->fh);
  fuse_reply_err(req, 0);
}

/**
 * The open fd of a sidecar, once the controller has vouched for it: checked against the sha256
 * written after its bytes, or written now when it was missing or not whole. A fill that fails
 * (no space left, the source gone) fails the reads that waited for it, and only those: the next
 * read asks again, so a moment of ENOSPC is not EIO for the life of the mount.
 */
static int sidecar_fd(struct sidecar *sc) {
  uint32_t waited = 0; // the fill this read asked for or joined
  pthread_mutex_lock(&fill_lock);
  for (;;) {
    if (sc->state == SIDECAR_READY) break;
    if (sc->state == SIDECAR_FAILED) {
      if (controller_gone || (waited != 0 && sc->fill_id == waited)) {
        pthread_mutex_unlock(&fill_lock);
        errno = sc->err > 0 ? sc->err : EIO;
        return -1;
      }
      sc->state = SIDECAR_ABSENT; // failed before this read: try again
      sc->fill_id = 0;
    }
    if (sc->state == SIDECAR_VOUCHED) {
      int fd = open(sc->path, O_RDONLY | O_CLOEXEC);
      struct stat st;
      if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == sc->size + SIDECAR_DIGEST_BYTES) {
        sc->fd = fd;
        sc->state = SIDECAR_READY;
        break;
      }
      if (fd >= 0) close(fd);
      sc->state = SIDECAR_FAILED; // vouched for and then not there (or the wrong size)
      sc->err = EIO;
      logf_("sidecar %s: not written as expected (%llu bytes and their sha256)", sc->path, (unsigned long long)sc->size);
      continue;
    }
    if (sc->state == SIDECAR_ABSENT) {
      if (controller_gone) {
        pthread_mutex_unlock(&fill_lock);
        errno = EIO;
        return -1;
      }
      sc->state = SIDECAR_PENDING;
      sc->fill_id = atomic_fetch_add(&next_fill_id, 1);
      if (sc->fill_id == 0) sc->fill_id = atomic_fetch_add(&next_fill_id, 1); // 0 means none
      if (npending == pending_cap) {
        pending_cap = pending_cap ? pending_cap * 2 : 16;
        pending = realloc(pending, pending_cap * sizeof *pending);
      }
      pending[npending++] = sc;
      send_msg(MSG_FILL, sc->fill_id, 0, sc->path);
    }
    if (sc->state == SIDECAR_PENDING && waited == 0) waited = sc->fill_id; // joined a fill under way
    if (controller_gone && sc->state == SIDECAR_PENDING) {
      sc->state = SIDECAR_FAILED;
      sc->err = EIO;
      continue;
    }
    pthread_cond_wait(&fill_done, &fill_lock);
  }
  int fd = sc->fd;
  pthread_mutex_unlock(&fill_lock);
  return fd;
}

/**
 * Asks the disk for the source's bytes up to PREFETCH past a read of [at, end), so they are
 * cached by the time the kernel's next requests come. The kernel's own readahead of the source
 * does not do it: our workers read it concurrently, out of order, and its per-file window takes
 * that for random reads (synchronous 1 MiB reads from the disk). One frontier per source: a
 * read far behind it (another file's bytes, a jump back) starts a new one.
 */
static void source_prefetch(struct source *s, uint64_t at, uint64_t end) {
  uint64_t ahead = atomic_load(&s->ahead);
  for (;;) {
    if (end + PREFETCH / 2 <= ahead && at + 2 * PREFETCH >= ahead) return; // far enough ahead already
    uint64_t from = at + 2 * PREFETCH < ahead || ahead < at ? at : ahead;
    uint64_t to = end + PREFETCH < (uint64_t)s->size ? end + PREFETCH : (uint64_t)s->size;
    if (to <= from) return;
    if (atomic_compare_exchange_weak(&s->ahead, &ahead, to)) {
      posix_fadvise(s->fd, (off_t)from, (off_t)(to - from), POSIX_FADV_WILLNEED);
      return;
    }
  }
}

/**
 * Drops the source's pages from the page cache once they are served: the mount's own pages
 * (kept across opens) hold these bytes now, and keeping both would cache the model twice.
 * Dropped a step behind the reads (workers serve them out of order, and a page at the edge of a
 * read is needed by the next), a DROP_STEP at a time (each drop drains every CPU's page lists).
 * A read that jumps back starts the watermark again there; `last` (the file's last bytes) drops
 * up to the end of the read.
 */
static void source_served(struct source *s, uint64_t at, uint64_t end, int last) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t upto = last ? end / page * page : (at / DROP_STEP > 0 ? (at / DROP_STEP - 1) * DROP_STEP : 0);
  uint64_t dropped = atomic_load(&s->dropped);
  for (;;) {
    if (at + 2 * DROP_STEP < dropped) { // jumped back: the watermark starts again here
      if (atomic_compare_exchange_weak(&s->dropped, &dropped, at / DROP_STEP * DROP_STEP)) return;
      continue;
    }
    if (upto < dropped + (last ? 1 : DROP_STEP)) return;
    if (atomic_compare_exchange_weak(&s->dropped, &dropped, upto)) {
      posix_fadvise(s->fd, (off_t)dropped, (off_t)(upto - dropped), POSIX_FADV_DONTNEED);
      return;
    }
  }
}

static int pread_all(int fd, uint8_t *out, uint64_t length, uint64_t offset) {
  while (length > 0) {
    ssize_t n = pread(fd, out, length, (off_t)offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) {
      errno = EIO; // shorter than planned: truncated under us
      return -1;
    }
    out += n;
    length -= (uint64_t)n;
    offset += (uint64_t)n;
  }
  return 0;
}

// The read buffers (MAX_READ bytes each): a fixed pool, mapped and touched once before the
// first request, that a worker takes for one read and gives back right after its reply. Not one
// per worker thread: libfuse starts workers as reads queue up (up to its max threads, 8 here; in
// 3.14 idle workers are never retired by default, and we keep them, see main), and a buffer per
// worker was faulted in only as far as its reads reached, so with the EROFS mounts, which leave
// the daemon a few reads per load, its resident memory climbed in steps over the loads (3.0 ->
// 7.1 MiB over 40) as more workers and more of their buffers were touched. The pool is all
// resident from the start, so memory after the first load is memory after any number of loads.
// As many buffers as CPUs, at most one per worker: a read's time is a copy or a pread, so more
// reads at once than CPUs gain little, and a worker without one waits for the next reply.
static uint8_t **read_free; // the buffers not taken, a stack
static unsigned read_nfree;
static pthread_mutex_t read_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t read_pool_back = PTHREAD_COND_INITIALIZER;

/** Maps and faults in `n` read buffers; -1 (errno set) when they cannot be. */
static int read_pool_make(unsigned n) {
  read_free = calloc(n, sizeof *read_free);
  if (!read_free) return -1;
  // MAP_POPULATE writes in every page now (a private writable mapping is populated for write),
  // so no later read faults one in and the pool's pages are resident before the first request.
  uint8_t *pool = mmap(NULL, (size_t)n * MAX_READ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (pool == MAP_FAILED) return -1;
  for (unsigned i = 0; i < n; i++) read_free[i] = pool + (size_t)i * MAX_READ;
  read_nfree = n;
  return 0;
}

/** A read buffer, waiting for one given back when all are taken (each is, right after a reply). */
static uint8_t *read_buf_take(void) {
  pthread_mutex_lock(&read_pool_lock);
  while (read_nfree == 0) pthread_cond_wait(&read_pool_back, &read_pool_lock);
  uint8_t *buf = read_free[--read_nfree];
  pthread_mutex_unlock(&read_pool_lock);
  return buf;
}

static void read_buf_give(uint8_t *buf) {
  pthread_mutex_lock(&read_pool_lock);
  read_free[read_nfree++] = buf;
  pthread_cond_signal(&read_pool_back);
  pthread_mutex_unlock(&read_pool_lock);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  (void)ino;
  struct vfile *f = (struct vfile *)(uintptr_t)fi->fh;
  if ((uint64_t)off >= f->size) {
    fuse_reply_buf(req, NULL, 0);
    return;
  }
  if (size > f->size - (uint64_t)off) size = f->size - (uint64_t)off;
  if (size > MAX_READ) size = MAX_READ;
  uint64_t start = (uint64_t)off, end = start + size;
  // the first extent that ends after `start`
  uint32_t lo = 0, hi = f->nextents;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (f->extents[mid].at + f->extents[mid].length <= start) lo = mid + 1;
    else hi = mid;
  }
  // The sidecars first, before a buffer is taken: one may wait for the controller to fill it
  // (seconds, a tensor computed), and a buffer held meanwhile would hold up reads that need none.
  for (uint32_t i = lo; i < f->nextents && f->extents[i].at < end; i++) {
    if (f->extents[i].kind == EXT_SIDECAR && sidecar_fd(&f->sidecars[f->extents[i].index]) < 0) {
      fuse_reply_err(req, EIO);
      return;
    }
  }
  // Given back on every path below: before an error reply, right after the data reply.
  uint8_t *buf = read_buf_take();
  for (uint32_t i = lo; i < f->nextents && f->extents[i].at < end; i++) {
    const struct extent *e = &f->extents[i];
    uint64_t from = e->at > start ? e->at : start;
    uint64_t to = e->at + e->length < end ? e->at + e->length : end;
    uint8_t *dst = buf + (from - start);
    uint64_t n = to - from, at = e->offset + (from - e->at);
    switch (e->kind) {
      case EXT_ZERO:
        memset(dst, 0, n);
        break;
      case EXT_MEMORY:
        memcpy(dst, f->memory + at, n);
        break;
      case EXT_SOURCE: {
        struct source *s = f->sources[e->index];
        if (!source_ok(s)) goto fail;
        source_prefetch(s, at, at + n);
        if (pread_all(s->fd, dst, n, at) != 0) goto fail;
        break;
      }
      case EXT_SIDECAR: {
        int fd = sidecar_fd(&f->sidecars[e->index]); // ready: resolved above
        if (fd < 0 || pread_all(fd, dst, n, at) != 0) goto fail;
        break;
      }
      default:
        goto fail;
    }
  }
  // A source checked before its bytes were read may have gone while they were: check again
  // after, so bytes read from a file that was replaced meanwhile are never handed out.
  for (uint32_t i = lo; i < f->nextents && f->extents[i].at < end; i++) {
    if (f->extents[i].kind == EXT_SOURCE && !source_ok(f->sources[f->extents[i].index])) goto fail;
  }
  // Replied first, the pages dropped after (off the read's latency): the reply can let the
  // kernel release the handle, so the file is held until then. The reply is written to the
  // device before fuse_reply_buf returns, so the buffer is free again right after.
  atomic_fetch_add(&f->refs, 1);
  fuse_reply_buf(req, (const char *)buf, size);
  read_buf_give(buf);
  for (uint32_t i = lo; i < f->nextents && f->extents[i].at < end; i++) {
    const struct extent *e = &f->extents[i];
    if (e->kind != EXT_SOURCE) continue;
    uint64_t from = e->at > start ? e->at : start, to = e->at + e->length < end ? e->at + e->length : end;
    source_served(f->sources[e->index], e->offset + (from - e->at), e->offset + (to - e->at), to == e->at + e->length && to == f->size);
  }
  vfile_put(f);
  return;
fail:
  read_buf_give(buf);
  fuse_reply_err(req, EIO);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  (void)ino, (void)buf, (void)size, (void)off, (void)fi;
  fuse_reply_err(req, EROFS);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  pthread_rwlock_rdlock(&tree_lock);
  struct node *n = node_get(ino);
  int ok = n && n->kind == NODE_DIR;
  pthread_rwlock_unlock(&tree_lock);
  if (!ok) {
    fuse_reply_err(req, n ? ENOTDIR : ENOENT);
    return;
  }
  fi->cache_readdir = 0;
  fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  (void)fi;
  char *buf = malloc(size);
  size_t used = 0;
  pthread_rwlock_rdlock(&tree_lock);
  struct node *dir = node_get(ino);
  if (!dir || dir->kind != NODE_DIR) {
    pthread_rwlock_unlock(&tree_lock);
    free(buf);
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  // offsets: 1 ".", 2 "..", 3+i the i-th child
  for (off_t k = off; (uint64_t)k < 2 + (uint64_t)dir->nchildren; k++) {
    struct stat st = {0};
    const char *name;
    if (k == 0) {
      name = ".";
      st.st_ino = dir->ino;
      st.st_mode = S_IFDIR;
    } else if (k == 1) {
      name = "..";
      st.st_ino = dir->parent ? dir->parent->ino : dir->ino;
      st.st_mode = S_IFDIR;
    } else {
      struct node *c = dir->children[k - 2];
      // A dot-name is not listed (a lookup finds it): the files the controller adds for its own
      // use (the devices of its EROFS mounts, `.erofs/`) are no models to a scan of the folder
      // (llama-server's --models-dir takes every folder as a model's).
      if (c->name[0] == '.') continue;
      name = c->name;
      fill_stat(c, &st);
    }
    size_t want = fuse_add_direntry(req, buf + used, size - used, name, &st, k + 1);
    if (want > size - used) break;
    used += want;
  }
  pthread_rwlock_unlock(&tree_lock);
  fuse_reply_buf(req, buf, used);
  free(buf);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
  (void)ino;
  struct statvfs s = {.f_bsize = 4096, .f_frsize = 4096, .f_namemax = 255, .f_flag = ST_RDONLY};
  fuse_reply_statfs(req, &s);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
  (void)ino;
  fuse_reply_err(req, (mask & W_OK) ? EROFS : 0);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .readlink = op_readlink,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .release = op_release,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .statfs = op_statfs,
    .access = op_access,
};

// --erofs IMAGE DIR READ_AHEAD_KB [DEVICE...]: the other way to present the files, for root on a
// kernel with file-backed EROFS (src/erofs.ts writes the image; its chunks point into DEVICE k,
// the blob). Here because this is the native binary @compat/mount already builds, ships and finds;
// it needs no FUSE: one mount(2), one sysfs write, then exit (the kernel serves every read).
// mount(8) cannot do it: given a regular file it sets up a loop device, and that mount fails.

// FS_IOC_GETFSSYSFSPATH (Linux 6.8, linux/fs.h, not included: it clashes with sys/mount.h on older
// glibc): the file system's folder under /sys/fs, "erofs/<s_id>".
struct compat_fs_sysfs_path {
  uint8_t len;
  uint8_t name[128];
};
#ifndef FS_IOC_GETFSSYSFSPATH
#define FS_IOC_GETFSSYSFSPATH _IOR(0x15, 1, struct compat_fs_sysfs_path)
#endif

// The mount's own backing_dev_info is /sys/class/bdi/erofs-N (N a global sequence). On 6.18 the
// superblock's s_id, which FS_IOC_GETFSSYSFSPATH names, is that same "erofs-N": this maps the mount
// to its bdi without guessing which entry appeared. Its read_ahead_kb defaults to 128, which caches
// 128 KiB folios; a larger one lets the page cache take 2 MiB folios, i.e. PMD mappings.
static int erofs_set_read_ahead(const char *dir, const char *kb, char *bdi, size_t bdi_len) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  struct compat_fs_sysfs_path p = {0};
  int r = ioctl(fd, FS_IOC_GETFSSYSFSPATH, &p);
  int err = errno;
  close(fd);
  if (r != 0) return -err;
  if (p.len == 0 || p.len >= sizeof p.name) return -EINVAL;
  p.name[p.len] = 0;
  const char *slash = strrchr((const char *)p.name, '/');
  snprintf(bdi, bdi_len, "%s", slash ? slash + 1 : (const char *)p.name);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", bdi);
  fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = write(fd, kb, strlen(kb));
  err = errno;
  close(fd);
  return n == (ssize_t)strlen(kb) ? 0 : -(n < 0 ? err : EIO);
}

static int erofs_main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: ollama-compat-mountd --erofs IMAGE DIR READ_AHEAD_KB [DEVICE...]\n");
    return 2;
  }
  const char *image = argv[1], *dir = argv[2], *kb = argv[3];
  // The options are one page at most (the kernel copies one page of mount data) and comma-separated:
  // a device path with a comma cannot be named.
  char data[4096];
  size_t at = 0;
  for (int i = 4; i < argc; i++) {
    if (strchr(argv[i], ',')) {
      fprintf(stderr, "EROFS_UNSUPPORTED: device path %s has a comma, which the mount options cannot carry\n", argv[i]);
      return 2;
    }
    int n = snprintf(data + at, sizeof data - at, "device=%s,", argv[i]);
    if (n < 0 || (size_t)n >= sizeof data - at) {
      fprintf(stderr, "EROFS_UNSUPPORTED: the device paths need more than the %zu bytes of mount options\n", sizeof data);
      return 2;
    }
    at += (size_t)n;
  }
  // directio: the image's reads of the blob bypass the blob's page cache, so the bytes are cached
  // once (in the EROFS file's), and the faulting process is not charged the backing reads.
  if (snprintf(data + at, sizeof data - at, "directio") >= (int)(sizeof data - at)) {
    fprintf(stderr, "EROFS_UNSUPPORTED: the device paths need more than the %zu bytes of mount options\n", sizeof data);
    return 2;
  }
  if (mount(image, dir, "erofs", MS_RDONLY | MS_NODEV | MS_NOSUID, data) != 0) {
    int err = errno;
    fprintf(stderr, "EROFS_UNAVAILABLE: mount(2) of %s on %s refused: %s (errno %d)\n", image, dir, strerror(err), err);
    return 3;
  }
  char bdi[128] = "";
  int r = erofs_set_read_ahead(dir, kb, bdi, sizeof bdi);
  if (r != 0) {
    // Without it the mount is slower than FUSE's copy path promises: take it down, the caller falls back.
    fprintf(stderr, "EROFS_UNAVAILABLE: cannot set read_ahead_kb of the mount's bdi%s%s: %s\n", bdi[0] ? " " : "", bdi, strerror(-r));
    if (umount2(dir, 0) != 0) umount2(dir, MNT_DETACH);
    return 4;
  }
  printf("bdi %s\n", bdi);
  return 0;
}

// --erofs-umount DIR: unmounts; while a process still maps a file of it (EBUSY), detaches it
// instead (the kernel ends it when the last user goes).
static int erofs_umount_main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: ollama-compat-mountd --erofs-umount DIR\n");
    return 2;
  }
  if (umount2(argv[1], 0) == 0) return 0;
  if (errno == EBUSY && umount2(argv[1], MNT_DETACH) == 0) {
    printf("detached\n");
    return 0;
  }
  fprintf(stderr, "umount2(%s): %s (errno %d)\n", argv[1], strerror(errno), errno);
  return 3;
}

static int usage(void) {
  fprintf(stderr,
          "usage: ollama-compat-mountd MOUNTPOINT [--allow-other] [--threads N]\n"
          "       ollama-compat-mountd --erofs IMAGE DIR READ_AHEAD_KB [DEVICE...]\n"
          "       ollama-compat-mountd --erofs-umount DIR\n"
          "  Started by @compat/mount (ollama-compat mount), which sends the files over stdin.\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *mountpoint = NULL;
  int allow_other = 0, threads = 8;
  if (argc > 1 && strcmp(argv[1], "--erofs") == 0) return erofs_main(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "--erofs-umount") == 0) return erofs_umount_main(argc - 1, argv + 1);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--allow-other") == 0) allow_other = 1;
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--version") == 0) {
      printf("ollama-compat-mountd 1 (libfuse %d)\n", fuse_version());
      return 0;
    } else if (argv[i][0] == '-' || mountpoint) return usage();
    else mountpoint = argv[i];
  }
  if (!mountpoint || threads < 1) return usage();
  owner_uid = getuid();
  owner_gid = getgid();
  signal(SIGPIPE, SIG_IGN);

  // the root folder is inode 1 (FUSE_ROOT_ID); inode 0 is not one
  nodes_cap = 64;
  nodes = calloc(nodes_cap, sizeof *nodes);
  nnodes = 1;
  node_new(NODE_DIR, "");

  inotify_fd = inotify_init1(IN_CLOEXEC);
  if (inotify_fd < 0) logf_("inotify unavailable (%s): sources are checked on every read only", strerror(errno));

  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned nbufs = cpus < 1 ? 1 : cpus > threads ? (unsigned)threads : (unsigned)cpus;
  if (read_pool_make(nbufs) != 0) {
    logf_("cannot map %u read buffers of %u bytes: %s", nbufs, MAX_READ, strerror(errno));
    return 1;
  }

  char opts[256];
  snprintf(opts, sizeof opts, "ro,default_permissions,fsname=ollama-compat,subtype=ollama-compat,max_read=%u%s", MAX_READ, allow_other ? ",allow_other" : "");
  char *fargv[] = {argv[0], "-o", opts, NULL};
  struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
  session = fuse_session_new(&args, &ops, sizeof ops, NULL);
  if (!session) return 1;
  if (fuse_set_signal_handlers(session) != 0) return 1;
  if (fuse_session_mount(session, mountpoint) != 0) {
    fuse_remove_signal_handlers(session);
    fuse_session_destroy(session);
    return 3;
  }

  // Helper threads take no signals: SIGTERM/SIGINT must reach the loop's main thread.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGHUP);
  sigaddset(&block, SIGQUIT);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  pthread_t control, watch;
  pthread_create(&control, NULL, control_thread, NULL);
  if (inotify_fd >= 0) pthread_create(&watch, NULL, watch_thread, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);

  send_msg(MSG_READY, 0, (int32_t)getpid(), mountpoint);

  struct fuse_loop_config *cfg = fuse_loop_cfg_create();
  // libfuse 3.14 (Debian 12's) starts a worker whenever none is free, up to max threads (10 by
  // default), and by default never retires one (max idle -1).
  fuse_loop_cfg_set_max_threads(cfg, (unsigned)threads);
  // Idle workers stay: retiring them made libfuse start and stop a thread (and map its buffers)
  // every few requests of a cold load, about 150 for 1 GiB read.
  fuse_loop_cfg_set_idle_threads(cfg, (unsigned)threads);
  int rc = fuse_session_loop_mt(session, cfg);
  fuse_loop_cfg_destroy(cfg);

  // Wake fills that wait for an answer that will not come.
  pthread_mutex_lock(&fill_lock);
  controller_gone = 1;
  pthread_cond_broadcast(&fill_done);
  pthread_mutex_unlock(&fill_lock);
  fuse_session_unmount(session);
  fuse_remove_signal_handlers(session);
  struct fuse_session *se = session;
  session = NULL;
  fuse_session_destroy(se);
  return rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP ? 0 : 1;
}
