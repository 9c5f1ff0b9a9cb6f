/* A tiny NSS passwd source for the tests: the "directory" accounts a site
 * gets from LDAP or SSSD, with names that glibc's files backend refuses (it
 * reads a passwd line starting with '-' as NIS compat syntax). The tests
 * enable it only inside a mount namespace whose /etc/nsswitch.conf says
 * "passwd: files epilogtest", with LD_LIBRARY_PATH pointing here. */
#include <errno.h>
#include <nss.h>
#include <pwd.h>
#include <string.h>

struct account { const char *name; uid_t uid; gid_t gid; };
static const struct account accounts[] = {
    {"-v", 50199, 50199},
    /* a second name at je.kim's uid (a listed operator's), as a directory
     * whose uids collide with a local account's serves one */
    {"jekim-alias", 50103, 50103},
    {NULL, 0, 0},
};
static int next_entry;

static enum nss_status fill(const struct account *a, struct passwd *pw, char *buf, size_t len, int *errnop)
{
    static const char dir[] = "/nonexistent", shell[] = "/usr/sbin/nologin";
    size_t name = strlen(a->name) + 1;
    if (len < name + 2 + 1 + sizeof dir + sizeof shell) {
        *errnop = ERANGE;
        return NSS_STATUS_TRYAGAIN;
    }
    pw->pw_name = memcpy(buf, a->name, name);
    pw->pw_passwd = memcpy(buf + name, "x", 2);
    pw->pw_gecos = buf + name + 2;
    pw->pw_gecos[0] = '\0';
    pw->pw_dir = memcpy(buf + name + 3, dir, sizeof dir);
    pw->pw_shell = memcpy(buf + name + 3 + sizeof dir, shell, sizeof shell);
    pw->pw_uid = a->uid;
    pw->pw_gid = a->gid;
    return NSS_STATUS_SUCCESS;
}

enum nss_status _nss_epilogtest_getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t len, int *errnop)
{
    for (const struct account *a = accounts; a->name; a++)
        if (strcmp(a->name, name) == 0)
            return fill(a, pw, buf, len, errnop);
    return NSS_STATUS_NOTFOUND;
}

enum nss_status _nss_epilogtest_getpwuid_r(uid_t uid, struct passwd *pw, char *buf, size_t len, int *errnop)
{
    for (const struct account *a = accounts; a->name; a++)
        if (a->uid == uid)
            return fill(a, pw, buf, len, errnop);
    return NSS_STATUS_NOTFOUND;
}

enum nss_status _nss_epilogtest_setpwent(int stayopen)
{
    (void)stayopen;
    next_entry = 0;
    return NSS_STATUS_SUCCESS;
}

enum nss_status _nss_epilogtest_endpwent(void)
{
    return NSS_STATUS_SUCCESS;
}

enum nss_status _nss_epilogtest_getpwent_r(struct passwd *pw, char *buf, size_t len, int *errnop)
{
    enum nss_status status;
    if (!accounts[next_entry].name)
        return NSS_STATUS_NOTFOUND;
    status = fill(&accounts[next_entry], pw, buf, len, errnop);
    if (status == NSS_STATUS_SUCCESS)
        next_entry++;
    return status;
}
