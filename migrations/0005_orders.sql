-- Orders (src/orders.rs, `--orders true`): one row per unit sold, written from the Redis
-- Stream `stock:orders` by the instances' consumer group, after the sale.
--
-- The sale id is the primary key, so an entry delivered twice (a consumer that wrote it
-- and died before acknowledging it, then another that took it over) is one row.
CREATE TABLE IF NOT EXISTS seckill_orders (
    sale_id  VARCHAR(32)  NOT NULL,
    -- The random name of the sale the unit was sold in (`stock:sale`, drawn at every
    -- reset), so the orders of one sale can be told from earlier ones.
    sale     VARCHAR(64)  NOT NULL,
    -- The buyer the request named (`?buyer=`), if it named one.
    buyer    VARCHAR(64)  NULL,
    instance VARCHAR(191) NOT NULL,
    sold_at  DATETIME(3)  NOT NULL,
    PRIMARY KEY (sale_id),
    KEY seckill_orders_by_sale (sale)
) ENGINE = InnoDB;
