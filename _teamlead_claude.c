/* The ``teamlead-claude`` command, compiled: the launcher's fast path.
 *
 * An interpreter takes 10 ms or more to start, a twentieth of a short query on the bare
 * CLI; this program takes well under one. It does what the launcher in Python
 * (``_teamlead_claude.py``, installed beside it as ``teamlead-claude-py``) does for a
 * stream-json session whose warm process runs already: it hands the session to that
 * process (the request, protocol ``tlc1``, in ``teamlead/_shim/warm.py``), passes on the stop
 * signals it gets and exits with the session's exit code.
 *
 * The warm process's name is made by the launcher in Python, from what only an
 * interpreter knows (its module path). The launcher in Python leaves a card for this one
 * (``_card`` there): the name and what it was made from that this program can check (the
 * variables, the mount namespace and the time and size of each file and folder it read). A
 * card that checks out gives the name; anything else (no card, another variable, a file
 * changed, no warm process, a warm process that will not take the session, another command
 * line) runs ``teamlead-claude-py`` in this process's place, before anything of the session
 * was read: the same session either way.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;

#define CARD_MAGIC "tlcc1"
#define CARD_MAX (4 << 20)
#define READY_S 60 /* a warm process answers in this (as the launcher in Python waits) */
#define HANDOFF_VAR "TEAMLEAD_CLAUDE_LAUNCHER"

static char python_launcher[PATH_MAX];
static char card_path[PATH_MAX];
static char **args;
static int conn = -1;

/* Run the launcher in Python in this process's place, told where to leave its card (or to
 * run the session itself, ``cold``). */
static void python(const char *how) {
    char value[PATH_MAX + 16];
    if (strcmp(how, "card") == 0 && card_path[0])
        snprintf(value, sizeof value, "card:%s", card_path);
    else
        snprintf(value, sizeof value, "%s", strcmp(how, "cold") == 0 ? "cold" : "");
    if (value[0])
        setenv(HANDOFF_VAR, value, 1);
    else
        unsetenv(HANDOFF_VAR);
    args[0] = python_launcher;
    execv(python_launcher, args);
    fprintf(stderr,
            "teamlead-claude: cannot run %s (%s); reinstall teamlead, or point the app at "
            "teamlead-claude-py\n",
            python_launcher, strerror(errno));
    _exit(2);
}

static int is_stream_session(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--input-format=stream-json") == 0)
            return 1;
        if (strcmp(argv[i], "--input-format") == 0 && i + 1 < argc &&
            strcmp(argv[i + 1], "stream-json") == 0)
            return 1;
    }
    return 0;
}

/* The folder of this user's cards: the runtime folder, else the temporary one. */
static int card_folder(char *out, size_t size) {
    const char *base = getenv("XDG_RUNTIME_DIR");
    if (!base || base[0] != '/')
        base = getenv("TMPDIR");
    if (!base || base[0] != '/')
        base = "/tmp";
    int n = snprintf(out, size, "%s/teamlead-claude-%u", base, (unsigned)getuid());
    return n > 0 && (size_t)n < size;
}

/* FNV-1a, 64 bits: the card's file name, from this program's own path. */
static uint64_t fnv1a(const char *text) {
    uint64_t hash = 1469598103934665603ULL;
    for (; *text; text++)
        hash = (hash ^ (unsigned char)*text) * 1099511628211ULL;
    return hash;
}

/* The card's fields, NUL-separated; ``NULL`` at its end. */
static const char *field(const char **at, const char *end) {
    const char *start = *at;
    const char *nul = start < end ? memchr(start, '\0', (size_t)(end - start)) : NULL;
    if (!nul)
        return NULL;
    *at = nul + 1;
    return start;
}

static int count_field(const char **at, const char *end, long long *out) {
    const char *text = field(at, end);
    if (!text || !text[0])
        return 0;
    char *stop;
    errno = 0;
    *out = strtoll(text, &stop, 10);
    return errno == 0 && *stop == '\0';
}

/* The warm process's name if this user's card checks out, else ``NULL``. */
static const char *name_from_card(char *card, size_t size) {
    const char *at = card, *end = card + size;
    const char *magic = field(&at, end);
    if (!magic || strcmp(magic, CARD_MAGIC) != 0)
        return NULL;
    const char *name = field(&at, end);
    if (!name || !name[0] || strlen(name) > 100)
        return NULL;
    /* the mount namespace */
    const char *namespace = field(&at, end);
    char here[256];
    ssize_t got = readlink("/proc/self/ns/mnt", here, sizeof here - 1);
    here[got > 0 ? got : 0] = '\0';
    if (!namespace || strcmp(namespace, here) != 0)
        return NULL;
    /* the variables: each as the card has it, and no other of their kind */
    long long variables;
    if (!count_field(&at, end, &variables))
        return NULL;
    for (long long i = 0; i < variables; i++) {
        const char *pair = field(&at, end);
        const char *equals = pair ? strchr(pair, '=') : NULL;
        if (!equals)
            return NULL;
        char key[256];
        size_t length = (size_t)(equals - pair);
        if (length >= sizeof key)
            return NULL;
        memcpy(key, pair, length);
        key[length] = '\0';
        const char *value = getenv(key);
        if (!value || strcmp(value, equals + 1) != 0)
            return NULL;
    }
    long long kind = 0;
    for (char **entry = environ; *entry; entry++) {
        const char *pair = *entry;
        if (strncmp(pair, "PYTHON", 6) == 0 || strncmp(pair, "LC_", 3) == 0 ||
            strncmp(pair, "LANG", 4) == 0 || strncmp(pair, "TEAMLEAD_CLAUDE_WARM=", 21) == 0)
            kind++;
    }
    if (kind != variables)
        return NULL;
    /* the files and folders: each as it was (or still missing) */
    long long files;
    if (!count_field(&at, end, &files))
        return NULL;
    for (long long i = 0; i < files; i++) {
        const char *path = field(&at, end);
        long long mtime_ns, bytes;
        if (!path || !count_field(&at, end, &mtime_ns) || !count_field(&at, end, &bytes))
            return NULL;
        struct stat info;
        if (stat(path, &info) != 0) {
            if (mtime_ns != -1)
                return NULL;
            continue;
        }
        long long now_ns = (long long)info.st_mtim.tv_sec * 1000000000LL + info.st_mtim.tv_nsec;
        if (now_ns != mtime_ns || (long long)info.st_size != bytes)
            return NULL;
    }
    return at == end ? name : NULL;
}

/* Read this user's card (only a file of this user's that no one else can write). */
static char *read_card(size_t *size) {
    int fd = open(card_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    struct stat info;
    char *card = NULL;
    if (fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_uid == getuid() &&
        !(info.st_mode & 022) && info.st_size > 0 && info.st_size <= CARD_MAX) {
        card = malloc((size_t)info.st_size);
        size_t done = 0;
        while (card && done < (size_t)info.st_size) {
            ssize_t n = read(fd, card + done, (size_t)info.st_size - done);
            if (n <= 0) {
                free(card);
                card = NULL;
                break;
            }
            done += (size_t)n;
        }
        *size = done;
    }
    close(fd);
    return card;
}

static int connect_to(const char *name) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    size_t length = strlen(name);
    memcpy(address.sun_path + 1, name, length); /* abstract: a leading NUL */
    socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + length);
    struct ucred peer;
    socklen_t peer_size = sizeof peer;
    if (connect(fd, (struct sockaddr *)&address, size) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_size) == 0 &&
        peer.uid == getuid()) /* not a name another user took first */
        return fd;
    close(fd);
    return -1;
}

/* The request: directory, umask, argv and environment, with the three standard streams. */
static int send_request(int fd, int argc, char **argv) {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return 0;
    mode_t mask = umask(022);
    umask(mask);
    char umask_text[16], argc_text[16];
    snprintf(umask_text, sizeof umask_text, "%o", (unsigned)mask);
    snprintf(argc_text, sizeof argc_text, "%d", argc - 1);
    size_t total = 0, parts = 4 + (size_t)(argc - 1);
    for (char **entry = environ; *entry; entry++)
        parts++;
    const char **part = malloc(parts * sizeof *part);
    if (!part)
        return 0;
    size_t n = 0;
    part[n++] = "tlc1";
    part[n++] = cwd;
    part[n++] = umask_text;
    part[n++] = argc_text;
    for (int i = 1; i < argc; i++)
        part[n++] = argv[i];
    for (char **entry = environ; *entry; entry++)
        part[n++] = *entry;
    for (size_t i = 0; i < n; i++)
        total += strlen(part[i]) + (i ? 1 : 0);
    if (total > 0xffffffffu) {
        free(part);
        return 0;
    }
    char *data = malloc(4 + total);
    if (!data) {
        free(part);
        return 0;
    }
    data[0] = (char)(total >> 24), data[1] = (char)(total >> 16);
    data[2] = (char)(total >> 8), data[3] = (char)total;
    char *at = data + 4;
    for (size_t i = 0; i < n; i++) {
        if (i)
            *at++ = '\0';
        size_t length = strlen(part[i]);
        memcpy(at, part[i], length);
        at += length;
    }
    free(part);
    size_t size = 4 + total;
    int fds[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec vector = {.iov_base = data, .iov_len = size};
    struct msghdr message = {.msg_iov = &vector, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = sizeof control};
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(header), fds, sizeof fds);
    ssize_t sent = sendmsg(fd, &message, MSG_NOSIGNAL);
    size_t done = sent > 0 ? (size_t)sent : 0;
    while (sent >= 0 && done < size) {
        sent = send(fd, data + done, size - done, MSG_NOSIGNAL);
        done += sent > 0 ? (size_t)sent : 0;
    }
    free(data);
    return sent >= 0;
}

/* One ``\n``-ended line (what came before the end, at the end); -1 on a timeout. */
static int read_line(int fd, char *line, size_t size) {
    size_t n = 0;
    for (;;) {
        char byte;
        ssize_t got = recv(fd, &byte, 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return -1;
        if (got <= 0 || byte == '\n')
            break;
        if (n + 1 < size)
            line[n++] = byte;
    }
    line[n] = '\0';
    return (int)n;
}

static void quiet(int signum) { _exit(128 + signum); } /* nothing of the session ran yet */

static void forward(int signum) {
    unsigned char byte = (unsigned char)signum;
    int saved = errno;
    (void)send(conn, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT); /* a launcher gone: nothing to stop */
    errno = saved;
}

static void handle(void (*handler)(int)) {
    struct sigaction action = {.sa_handler = handler, .sa_flags = SA_RESTART};
    sigemptyset(&action.sa_mask);
    int stops[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++)
        sigaction(stops[i], &action, NULL);
}

static void timeout(int fd, int seconds) {
    struct timeval wait = {.tv_sec = seconds};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
}

int main(int argc, char **argv) {
    args = argv;
    char self[PATH_MAX];
    ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (length <= 0) {
        fprintf(stderr, "teamlead-claude: cannot find its own path (/proc/self/exe)\n");
        return 2;
    }
    self[length] = '\0';
    char *slash = strrchr(self, '/');
    snprintf(python_launcher, sizeof python_launcher, "%.*s/teamlead-claude-py",
             (int)(slash - self), self);
    const char *warm = getenv("TEAMLEAD_CLAUDE_WARM");
    if ((warm && strcmp(warm, "0") == 0) || !is_stream_session(argc, argv))
        python("");
    char folder[PATH_MAX];
    if (!card_folder(folder, sizeof folder) ||
        snprintf(card_path, sizeof card_path, "%s/%016llx", folder,
                 (unsigned long long)fnv1a(self)) >= (int)sizeof card_path)
        python("");
    size_t size = 0;
    char *card = read_card(&size);
    const char *name = card ? name_from_card(card, size) : NULL;
    if (!name)
        python("card");
    handle(quiet);
    conn = connect_to(name);
    if (conn < 0) /* no warm process: the launcher in Python starts one */
        python("card");
    timeout(conn, READY_S);
    if (!send_request(conn, argc, argv)) {
        close(conn);
        python("card");
    }
    char answer[64];
    int got = read_line(conn, answer, sizeof answer);
    if (got < 0 || (got > 0 && strncmp(answer, "pid ", 4) != 0))
        python("cold"); /* too slow, or it will not run this session: run it here */
    if (got == 0) {     /* it ended before it held the streams: nothing of them was read */
        close(conn);
        python("card");
    }
    /* a stop signal from the go on is the session's: held while the handlers change */
    sigset_t stops, before;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT), sigaddset(&stops, SIGTERM), sigaddset(&stops, SIGHUP);
    sigprocmask(SIG_BLOCK, &stops, &before);
    if (send(conn, "g", 1, MSG_NOSIGNAL) != 1) {
        sigprocmask(SIG_SETMASK, &before, NULL);
        python("cold");
    }
    timeout(conn, 0);
    handle(forward);
    sigprocmask(SIG_SETMASK, &before, NULL);
    char last[64];
    if (read_line(conn, last, sizeof last) > 5 && strncmp(last, "exit ", 5) == 0)
        return atoi(last + 5);
    fprintf(stderr, "teamlead-claude: the warm teamlead process running it ended early\n");
    return 1;
}
