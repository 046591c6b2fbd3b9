#!/usr/bin/env bash
# Start the local services the tests use, each only if it is not answering yet.
# PostgreSQL, MariaDB, RabbitMQ and NATS are installed from Debian's packages on
# this kind of machine; the commands are the ones that start them there.
set -u

wait_for() {  # wait_for NAME SECONDS COMMAND...
    local name=$1 seconds=$2; shift 2
    for _ in $(seq "$seconds"); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 1
    done
    echo "services: $name did not come up in ${seconds}s" >&2
    return 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

want=${*:-postgresql mariadb rabbitmq nats}
status=0
for service in $want; do
    case $service in
    postgresql)
        # pg_partman, for the partitioned layout (Debian's package for the server's version).
        version=$(ls /etc/postgresql | head -n1)
        if [ ! -e "/usr/share/postgresql/$version/extension/pg_partman.control" ]; then
            echo "services: installing pg_partman for PostgreSQL $version"
            { DEBIAN_FRONTEND=noninteractive apt-get install -y -q "postgresql-$version-partman" ||
              { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
                  apt-get install -y -q "postgresql-$version-partman"; }; } >/dev/null || status=1
        fi
        if ! pg_isready -q -h 127.0.0.1 -p 5432; then
            echo "services: starting PostgreSQL"
            pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
            wait_for PostgreSQL 60 pg_isready -q -h 127.0.0.1 -p 5432 || status=1
        fi ;;
    mariadb)
        if ! port_open 3306; then
            echo "services: starting MariaDB"
            start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
            wait_for MariaDB 60 port_open 3306 || status=1
        fi ;;
    rabbitmq)
        if ! port_open 5672; then
            echo "services: starting RabbitMQ"
            rabbitmq-server -detached || true
            wait_for RabbitMQ 120 port_open 5672 || status=1
        fi ;;
    nats)
        if ! port_open 4222; then
            echo "services: starting NATS"
            start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
                -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || true
            wait_for NATS 30 port_open 4222 || status=1
        fi ;;
    *) echo "services: unknown service $service" >&2; status=1 ;;
    esac
done
exit $status
