#!/usr/bin/env bash
# Writes the migration goldens of conformance/testdata/executor/ from the
# pinned Ptah against a scratch PostgreSQL and a scratch MariaDB (README.md).
#
#   PTAH=…/bin/ptah PG_HOST=127.0.0.1 PG_PORT=55432 PG_USER=postgres [PG_PASSWORD=…] \
#   MY_HOST=127.0.0.1 MY_PORT=53306 MY_USER=mig MY_PASSWORD=… [RUNNER=…/ptah-runner] \
#   [GOLDEN_OUT=<dir>] bash conformance/testdata/executor/migrations-capture.sh [postgresql|mariadb]
#
# GOLDEN_OUT writes the goldens there instead of beside this script (the
# contract test compares what it writes with the goldens kept here).
#
# The databases it uses are named mig_golden_<scenario>; it drops and creates
# them (PostgreSQL through psql, MariaDB through the mariadb client as
# MY_ADMIN, default `mariadb -S /tmp/mdbx/sock -uroot`). The URL with the
# password is only ever in PTAH_DB_URL of Ptah's environment; Ptah masks it
# in what it prints.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
: "${PTAH:?the pinned ptah binary}"
engines=${1:-"postgresql mariadb"}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/work"
out=${GOLDEN_OUT:-$here}
# psql reads the password from its environment, never from argv.
[ -n "${PG_PASSWORD:-}" ] && export PGPASSWORD=$PG_PASSWORD

# The directory Ptah is shown: the goldens name it, so it is fixed.
dirs=/tmp/ptah-goldens/migrations
rm -rf "$dirs"
mkdir -p "$dirs"

# The normaliser of history.rs (`normalise_golden`), in sed: times, the
# correlation id, ports. A unit test holds every golden a fixed point of the
# Rust function, so the two cannot drift apart.
normalise() {
  # The runner's path differs between checkouts: the image's path stands in.
  local runner=${RUNNER:-/usr/local/bin/ptah-runner}
  sed -E \
    -e "s#${runner//#/\\#}#/usr/local/bin/ptah-runner#g" \
    -e 's/"time":"[^"]*"/"time":"<time>"/g' \
    -e 's/"applied_at": "[^"]*"/"applied_at": "<time>"/g' \
    -e 's/"execution_time": [0-9]+/"execution_time": 0/g' \
    -e 's/"correlation_id":"[0-9a-f]*"/"correlation_id":"<id>"/g' \
    -e 's/(127\.0\.0\.1|localhost):[0-9]+/\1:<port>/g'
}

pair() { # dir version name up down
  printf '%b' "$4" >"$1/$2_$3.up.sql"
  printf '%b' "$5" >"$1/$2_$3.down.sql"
}

# The base directory: three migrations, the third without a transaction.
base() { # dir
  mkdir -p "$1"
  pair "$1" 0000000001 products 'CREATE TABLE products (id integer PRIMARY KEY, sku varchar(64) NOT NULL);\n' 'DROP TABLE products;\n'
  pair "$1" 0000000002 orders 'CREATE TABLE orders (id integer PRIMARY KEY);\nALTER TABLE orders ADD COLUMN product_id integer;\n' 'DROP TABLE orders;\n'
  pair "$1" 0000000003 order_index '-- +ptah no_transaction\nCREATE INDEX orders_product ON orders (product_id);\n' 'DROP INDEX orders_product;\n'
}

seal() { "$PTAH" migrations hash --dir "$1" >/dev/null; }

# ptah <out-prefix> <args…>: runs Ptah in an empty directory with only the
# environment the runner gives it, and keeps both streams and the exit code.
run() {
  local out=$1
  shift
  set +e
  (cd "$scratch/work" && env -i PATH=/usr/bin:/bin HOME="$scratch/work" TZ=UTC PTAH_DB_URL="$url" \
    "$PTAH" "$@" >"$scratch/stdout" 2>"$scratch/stderr")
  local rc=$?
  set -e
  if [ -n "$out" ]; then
    normalise <"$scratch/stdout" >"$golden/$out.stdout"
    normalise <"$scratch/stderr" >"$golden/$out.stderr"
    echo "$rc" >"$golden/$out.exit"
  fi
  return 0
}

status() { run "$1" migrations status --json --migrations-dir="$2"; }
up() { # out dir limit extra…
  local out=$1 dir=$2 limit=$3
  shift 3
  run "$out" migrations up --migrations-dir="$dir" --limit="$limit" --exec-order=linear --verify-sum \
    --log-format=json --pre-up-hook='test -n "$PTAH_TARGET_VERSION"' "$@"
}

use_db() { # engine scenario: the URL of an existing database
  case $1 in
    postgresql) url="postgres://$PG_USER${PG_PASSWORD:+:$PG_PASSWORD}@$PG_HOST:$PG_PORT/mig_golden_$2?sslmode=disable" ;;
    mariadb) url="mysql://$MY_USER:$MY_PASSWORD@$MY_HOST:$MY_PORT/mig_golden_$2" ;;
  esac
}

fresh() { # engine scenario: a new, empty database
  local db="mig_golden_$2"
  case $1 in
    postgresql)
      psql -q -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
      ;;
    mariadb)
      ${MY_ADMIN:-mariadb -S /tmp/mdbx/sock -uroot} -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
      ;;
  esac
  use_db "$1" "$2"
}

for engine in $engines; do
  golden="$out/$engine"
  mkdir -p "$golden"
  d="$dirs/$engine"
  # MariaDB: this Ptah refuses tx-mode file from the CLI (its online-DDL
  # interceptor is always installed), so every run there is tx-mode none.
  tx=()
  [ "$engine" = mariadb ] && tx=(--tx-mode=none)

  # ready, then the run, then nothing pending.
  base "$d/base" && seal "$d/base"
  fresh "$engine" ready
  status migrations-status-ready "$d/base"
  up migrations-up-applied "$d/base" 3 "${tx[@]}"
  status migrations-status-nothing-pending "$d/base"
  up migrations-up-nothing-to-do "$d/base" 3 "${tx[@]}"

  # modified: an applied file's bytes changed (and resealed).
  cp -r "$d/base" "$d/modified"
  printf -- '-- orders, again\n' >>"$d/modified/0000000002_orders.up.sql"
  seal "$d/modified"
  status migrations-status-modified "$d/modified"

  # ahead: the database has 3, the directory stops at 2.
  cp -r "$d/base" "$d/ahead"
  rm "$d/ahead"/0000000003_*
  seal "$d/ahead"
  status migrations-status-ahead "$d/ahead"

  # out of order: 1 and 3 applied, then 2 appears.
  cp -r "$d/base" "$d/gap"
  rm "$d/gap"/0000000002_*
  sed -i 's/ON orders (product_id)/ON products (sku)/' "$d/gap/0000000003_order_index.up.sql"
  sed -i 's/orders_product/products_sku/' "$d/gap"/0000000003_order_index.*.sql
  seal "$d/gap"
  fresh "$engine" out_of_order
  up "" "$d/gap" 2 "${tx[@]}"
  cp -r "$d/gap" "$d/out-of-order"
  pair "$d/out-of-order" 0000000002 orders 'CREATE TABLE orders (id integer PRIMARY KEY);\n' 'DROP TABLE orders;\n'
  seal "$d/out-of-order"
  status migrations-status-out-of-order "$d/out-of-order"

  # a refusal by the pre-up hook: nothing runs.
  use_db "$engine" ready
  cp -r "$d/base" "$d/failing"
  pair "$d/failing" 0000000004 shipments 'CREATE TABLE shipments (id integer PRIMARY KEY);\n' 'DROP TABLE shipments;\n'
  pair "$d/failing" 0000000005 carriers 'CREATE TABLE carriers (id integer PRIMARY KEY);\nINSERT INTO carriers (id) VALUES (1);\nINSERT INTO carriers (id) VALUES (2), (1);\n' 'DROP TABLE carriers;\n'
  seal "$d/failing"
  run migrations-up-hook-refused migrations up --migrations-dir="$d/failing" --limit=2 --exec-order=linear \
    --verify-sum --log-format=json --pre-up-hook='exit 3' "${tx[@]}"

  # The runner's own hook refusing (RUNNER: a binary with the runner's
  # `check-sequence`): the approved digest is not the selection's.
  if [ -n "${RUNNER:-}" ]; then
    run migrations-up-sequence-refused migrations up --migrations-dir="$d/failing" --limit=2 --exec-order=linear \
      --verify-sum --log-format=json "${tx[@]}" --pre-up-hook="'$RUNNER' check-sequence \
'--sequence-digest=sha256:0000000000000000000000000000000000000000000000000000000000000000' '--source=$d/failing'"
  fi

  # 4 applies, 5 fails at its third statement (a duplicate key): Partial;
  # the dirty row it leaves is the dirty verdict.
  up migrations-up-failed-statement-3 "$d/failing" 2 "${tx[@]}"
  status migrations-status-dirty "$d/failing"

  if [ "$engine" = mariadb ]; then
    # tx-mode file, refused before any statement.
    fresh "$engine" file_mode
    run migrations-up-file-mode-refused migrations up --migrations-dir="$d/base" --limit=3 --exec-order=linear \
      --verify-sum --log-format=json --pre-up-hook='true'
    # The unknown outcome: CREATE UNIQUE INDEX stopped by a duplicate key.
    mkdir -p "$d/unknown"
    pair "$d/unknown" 0000000001 customers 'CREATE TABLE customers (id integer PRIMARY KEY, email varchar(100) NOT NULL) ENGINE=InnoDB;\n' 'DROP TABLE customers;\n'
    pair "$d/unknown" 0000000002 unique_email "INSERT INTO customers (id, email) VALUES (1, 'a@example.com');\nINSERT INTO customers (id, email) VALUES (2, 'a@example.com');\nCREATE UNIQUE INDEX customers_email ON customers (email);\n" 'DROP INDEX customers_email ON customers;\n'
    seal "$d/unknown"
    fresh "$engine" unknown
    up migrations-up-unknown "$d/unknown" 2 "${tx[@]}"
    status migrations-status-unknown "$d/unknown"
  else
    # Ptah's own unknown-outcome marker: the process killed mid-statement.
    mkdir -p "$d/interrupted"
    pair "$d/interrupted" 0000000001 t1 'CREATE TABLE t1 (id integer);\n' 'DROP TABLE t1;\n'
    pair "$d/interrupted" 0000000002 slow '-- +ptah no_transaction\nCREATE TABLE t2 (id integer);\nSELECT pg_sleep(5);\nCREATE TABLE t3 (id integer);\n' 'DROP TABLE t3;\nDROP TABLE t2;\n'
    seal "$d/interrupted"
    fresh "$engine" interrupted
    (cd "$scratch/work" && exec env -i PATH=/usr/bin:/bin HOME="$scratch/work" TZ=UTC PTAH_DB_URL="$url" \
      "$PTAH" migrations up --migrations-dir="$d/interrupted" --log-format=json >/dev/null 2>&1) &
    pid=$!
    for _ in $(seq 1 100); do
      n=$(psql -tA -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -d postgres \
        -c "SELECT count(*) FROM pg_stat_activity WHERE datname = 'mig_golden_interrupted' AND query LIKE 'SELECT pg_sleep%'")
      [ "$n" != 0 ] && break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    sleep 6
    status migrations-status-interrupted "$d/interrupted"
  fi
done
# The directories themselves, for the unit tests that derive each verdict.
rm -rf "$out/migrations-dirs"
mkdir -p "$out/migrations-dirs"
for engine in $engines; do cp -r "$dirs/$engine" "$out/migrations-dirs/$engine"; done
echo "goldens written under $out"
