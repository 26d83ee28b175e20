"""The host's boot id on every GPU sample: the trend tells a reset of the since-boot counters
(AER, volatile ECC, PCIe replay) by a new boot, even when the counter climbed past its old value.

Written by hand (one nullable column; older samples keep NULL: unknown, and the trend then
reads a drop as a reset, as before).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 21:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel  # noqa: F401  (autogenerate emits sqlmodel.sql.sqltypes types)
from alembic import op

revision: str = '0003'
down_revision: str | Sequence[str] | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('gpu_samples', schema=None) as batch_op:
        batch_op.add_column(sa.Column('boot_id', sqlmodel.sql.sqltypes.AutoString(),
                                      nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('gpu_samples', schema=None) as batch_op:
        batch_op.drop_column('boot_id')
