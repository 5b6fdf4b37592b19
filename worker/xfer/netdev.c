/* Which network devices UCX may use (worker/xfer/): the data port listens only where the cluster
 * reaches this worker.
 *
 *   - UCX_NET_DEVICES in the environment wins (e.g. "eth0,mlx5_0:1").
 *   - Else the interface is gworker's --interface, or the one this host routes to gsched through
 *     (a UDP connect sends nothing; getsockname gives the local address the route picks).
 *   - A loopback interface is used alone: a cluster reached over loopback stays on it.
 *   - Another interface is used with this host's RDMA ports (/sys/class/infiniband/<dev>/ports/<n>
 *     as "<dev>:<n>"): UCX's tcp transport then listens on that interface only, and InfiniBand /
 *     RoCE keep carrying chunks between hosts.
 *   - When no route is found UCX keeps its defaults, and says so in the log. */
#include "worker/xfer/xfer_int.h"

#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Does interface address @a a equal the local address @a local (same family)? */
static int gs__wnet_same_addr(const struct sockaddr *a, const struct sockaddr_storage *local)
{
    if (a == NULL || a->sa_family != local->ss_family) return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)local)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)local)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return 0;
}

/* The interface this host uses to reach @a host:@a port into @a name (and whether it is a
 * loopback one into *@a loopback_p); 0 when no route or interface is found. */
static int gs__wnet_route(const char *host, int port, char *name, size_t len, int *loopback_p)
{
    struct addrinfo hints, *ai = NULL;
    struct sockaddr_storage local;
    socklen_t slen = sizeof(local);
    struct ifaddrs *ifs = NULL;
    char svc[16];
    int fd, found = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_DGRAM;
    snprintf(svc, sizeof(svc), "%d", port);
    if (getaddrinfo(host, svc, &hints, &ai) != 0 || ai == NULL) return 0;
    fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&local, &slen) == 0 && getifaddrs(&ifs) == 0) {
        for (const struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
            if (!gs__wnet_same_addr(i->ifa_addr, &local)) continue;
            snprintf(name, len, "%s", i->ifa_name);
            *loopback_p = (i->ifa_flags & IFF_LOOPBACK) != 0;
            found = 1;
        }
        /* 127.0.0.0/8 is all loopback though only 127.0.0.1 may be configured */
        if (!found && local.ss_family == AF_INET &&
            (ntohl(((const struct sockaddr_in *)&local)->sin_addr.s_addr) >> 24) == 127) {
            for (const struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
                if (i->ifa_addr == NULL || !(i->ifa_flags & IFF_LOOPBACK)) continue;
                snprintf(name, len, "%s", i->ifa_name);
                *loopback_p = 1;
                found = 1;
            }
        }
    }
    if (ifs != NULL) freeifaddrs(ifs);
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return found;
}

/* Is @a name a loopback interface of this host? */
static int gs__wnet_is_loopback(const char *name)
{
    struct ifaddrs *ifs = NULL;
    int lo = 0;
    if (getifaddrs(&ifs) != 0) return 0;
    for (const struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next)
        if (strcmp(i->ifa_name, name) == 0 && (i->ifa_flags & IFF_LOOPBACK)) lo = 1;
    freeifaddrs(ifs);
    return lo;
}

/* Appends ",<dev>:<port>" for every RDMA port of this host to @a list (of @a cap bytes, NUL
 * terminated); ports that would not fit are left out (logged). */
static void gs__wnet_add_rdma(char *list, size_t cap)
{
    DIR *d = opendir("/sys/class/infiniband"), *pd;
    struct dirent *e, *pe;
    char path[512];
    if (d == NULL) return;   /* no RDMA devices */
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strlen(e->d_name) > 64) continue;
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports", e->d_name);
        if ((pd = opendir(path)) == NULL) continue;
        while ((pe = readdir(pd)) != NULL) {
            size_t used = strlen(list), need;
            if (pe->d_name[0] == '.' || strlen(pe->d_name) > 8) continue;
            need = 1 + strlen(e->d_name) + 1 + strlen(pe->d_name);
            if (used + need + 1 > cap) {
                GS_LOG_WARN("ucx network devices: RDMA port %s:%s left out (the device list is full)",
                            e->d_name, pe->d_name);
                continue;
            }
            snprintf(list + used, cap - used, ",%s:%s", e->d_name, pe->d_name);
        }
        closedir(pd);
    }
    closedir(d);
}

int gs__wucx_net_devices(gs_worker_t *w, const char *interface, ucp_config_t *cfg)
{
    char dev[IF_NAMESIZE + 1], list[1024];
    const char *why;
    int loopback = 0;
    ucs_status_t st;
    if (getenv("UCX_NET_DEVICES") != NULL) {
        GS_LOG_INFO("ucx network devices: %s (UCX_NET_DEVICES)", getenv("UCX_NET_DEVICES"));
        return 0;
    }
    if (interface != NULL) {
        if (strlen(interface) > IF_NAMESIZE || if_nametoindex(interface) == 0) {
            gs_error_set(GS_ERR_INVALID_PARAM, "--interface %s: no such network interface on this host",
                         interface);
            return -1;
        }
        snprintf(dev, sizeof(dev), "%s", interface);
        loopback = gs__wnet_is_loopback(dev);
        why = "--interface";
    } else if (gs__wnet_route(w->sched_host, w->sched_port, dev, sizeof(dev), &loopback)) {
        why = loopback ? "gsched is reached over loopback" : "the interface that reaches gsched";
    } else {
        GS_LOG_INFO("ucx network devices: UCX's defaults (no interface found that reaches gsched "
                    "at %s; set --interface or UCX_NET_DEVICES to limit them)", w->sched_host);
        return 0;
    }
    snprintf(list, sizeof(list), "%s", dev);
    if (!loopback) gs__wnet_add_rdma(list, sizeof(list));
    st = ucp_config_modify(cfg, "NET_DEVICES", list);
    if (st != UCS_OK) {
        GS_LOG_WARN("cannot limit ucx to the network devices %s: %s", list, ucs_status_string(st));
        return 0;
    }
    GS_LOG_INFO("ucx network devices: %s (%s)", list, why);
    return 0;
}
