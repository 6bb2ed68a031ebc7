-- The unit each order took: its stock segment (NULL for a stock in one piece) and the
-- stock its sale read (`stock_before`), as in the sale record. Two orders of one sale
-- for the same unit are one unit sold twice: after a failover of the stock's Redis lost
-- a sale whose order was already written, the promoted replica sells that unit again.
-- `seckill reconcile` (src/orders/reconcile.rs) counts them. Orders written before
-- this migration have NULL in both and are left out of that count.
ALTER TABLE seckill_orders
    ADD COLUMN segment      INT    NULL,
    ADD COLUMN stock_before BIGINT NULL;
