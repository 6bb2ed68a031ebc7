#!/usr/bin/env bash
# Lesson 13: the redis lock with the stock in four segments, one unit per buyer (and one
# request in ten from a buyer trying twice), and the orders.
# Needs: make services (MariaDB)
scripts/demo.sh redis+segments-4+one-per-buyer+orders
echo "scripts/demo.sh exited with code $?"
